"""The generator: a seeded random program over ops the lazy device supports.

It builds the program record by record while running it eagerly, so every
proposal is made against the operands' real shapes and dtypes. A record eager
PyTorch raises at is dropped, or kept (now and then) as an ``error`` record
the lazy device must raise at too. Records after which any float variable
holds a NaN or a subnormal are dropped: NaN payloads and subnormals (IREE's
CPU code flushes them to zero, README "Differences from eager") are not
compared.
"""
from __future__ import annotations

import dataclasses
import random
import warnings

import torch

from .program import DTYPES, Input, Op, Program, namespace, run_ops
from . import ops as catalog

INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _input(rng: random.Random, seed: int, functional: bool) -> Input:
    ndim = rng.choice((0, 1, 1, 2, 2, 2, 3, 3))
    shape = tuple(rng.choice((0, 1, 2, 2, 3, 3, 4)) if rng.random() < 0.08
                  else rng.choice((1, 2, 2, 3, 3, 4, 5)) for _ in range(ndim))
    dtype = rng.choice(("float32",) * 5 + ("float64",) + ("int64",) * 3 + ("int32",) * 2
                       + ("int16", "int8", "uint8") + ("bool",) * 2 + ("float16", "bfloat16"))
    # (lm.jit takes its arguments' values: "s", a view of a larger storage, is
    # a plain tensor there, and as_strided would read past it)
    # ("t" is not drawn: a transposed host tensor moved to the lazy device is
    # contiguous there, where eager's .to keeps its strides, so as_strided and
    # view of it differ; a known difference, left as is)
    layout = rng.choice(("c",) * 6 + ("s" if not functional else "c",)) if ndim else "c"
    grad = not functional and dtype in ("float32", "float64") and rng.random() < 0.25
    return Input(shape, dtype, seed, layout, grad)


def _bad_floats(env: dict) -> bool:
    """A float variable holds a NaN or a subnormal (not compared)."""
    for t in env.values():
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            d = t.detach()
            tiny = torch.finfo(d.dtype).tiny
            if bool(torch.isnan(d).any()) or bool(((d != 0) & (d.abs() < tiny)).any()):
                return True
    return False


def generate(seed: int, n_ops: int | None = None, functional: bool = False) -> Program:
    """The program of ``seed``: 1-3 inputs and ``n_ops`` (default 3-12)
    records; ``functional``: no host reads, autograd or raising records (a
    program for ``lm.jit`` and ``torch.compile``)."""
    rng = random.Random(seed)
    n_ops = rng.randint(3, 12) if n_ops is None else n_ops
    inputs = tuple(_input(rng, seed * 7 + k, functional) for k in range(rng.randint(1, 3)))
    prog = Program(seed, inputs, ())
    ns, _ = run_ops(prog, "cpu")
    env = {k: ns[f"v{k}"] for k in range(len(inputs))}
    next_id = len(inputs)
    backward_done = False
    tries = 0
    while len(prog.ops) < n_ops and tries < n_ops * 12:
        tries += 1
        op = catalog.propose(rng, env, next_id, backward_done, functional)
        if op is None:
            continue
        trial = dataclasses.replace(prog, ops=prog.ops + (op,))
        raised, new_ns = _try(trial, ns, op)
        if raised:
            if rng.random() < 0.2 and not op.kind.startswith("read") and not functional:
                prog = dataclasses.replace(prog, ops=prog.ops + (dataclasses.replace(
                    op, error=True),))
            ns = run_ops(prog, "cpu")[0]  # (the raise may have left a partial write)
            env = {i: ns[f"v{i}"] for i in prog.var_ids()}
            continue
        new_env = dict(env)
        new_env.update({i: new_ns[f"v{i}"] for i in op.outs})
        if _bad_floats(new_env) or _bad_grads(new_env):
            ns = run_ops(prog, "cpu")[0]  # undo the writes
            env = {i: ns[f"v{i}"] for i in prog.var_ids()}
            continue
        prog, env, ns = trial, new_env, new_ns
        next_id += len(op.outs)
        backward_done |= op.kind == "backward"
    return prog


def _bad_grads(env: dict) -> bool:
    """Non-finite gradients, or a variable the last record made unreadable
    (an ``unbind`` output after an in-place write through another view of
    its base: even ``is_leaf`` raises; seed 802018 crashed the generator)."""
    grads = {}
    for k, t in env.items():
        if not isinstance(t, torch.Tensor):
            continue
        try:
            leaf = t.is_leaf
        except RuntimeError:
            return True
        if leaf and t.grad is not None:
            grads[k] = t.grad
    return _bad_floats(grads)


def _try(prog: Program, ns: dict, op: Op):
    """Run ``op`` (the last record of ``prog``) in ``ns``: (raised, ns)."""
    from .program import compiled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            exec(compiled(op.render()), ns)
        except Exception:  # noqa: BLE001
            return True, ns
    return False, ns


def corpus(seeds, **kw) -> list[Program]:
    return [generate(s, **kw) for s in seeds]


__all__ = ["generate", "corpus", "DTYPES", "INT_DTYPES", "FLOAT_DTYPES", "namespace"]
