"""Capture for export: a module or function as ``main(args...) -> outputs``.

An nn.Module is captured as a function of (its parameters and buffers...,
its inputs...) through ``torch.func.functional_call``, so that the weights are
arguments of the lowered function that the writer binds to IREE parameters
rather than constants folded into the code. Two routes give the same
``Captured`` record:

- ``capture_lazy`` (static shapes): ``lm.jit`` on the lazy device, the same
  capture, graph and stages as training. Tensors made inside the function
  (lifted scalars, constants) are further arguments after the inputs; they
  are stored like parameters, as ``const.<i>``.
- ``dynamic.capture_dynamic`` (sizes chosen at run time): the same capture
  at two sizes, one module with those dimensions dynamic, as the size
  families compile (``dynamic.py``), with in-graph index checks.

Guarantees: capture never changes the module or its weights; a function that
reads a tensor's value on the host while being captured (``if x.sum() > 0``,
``.item()``) or runs an op eagerly is refused with ``ExportError``, since the
artifact would silently keep the value seen at export time.
"""
from __future__ import annotations

import inspect
import re
import time
from dataclasses import dataclass, field

import torch

from .. import metrics

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExportError(ValueError):
    """Something that cannot be exported; the message says what and why."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: torch.dtype
    shape: tuple  # ints, or symbol names (str) for sizes chosen at run time

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": dtype_name(self.dtype), "shape": list(self.shape)}


@dataclass
class Captured:
    """``linalg``: one ``func.func @main`` whose arguments are, in order,
    described by ``args``: a runtime input (``TensorInfo``, named) or a stored
    tensor (``(key, host tensor)``)."""

    linalg: str
    args: list                     # TensorInfo (an input) | (key, torch.Tensor) (stored)
    outputs: list[TensorInfo]
    output_structure: str          # "single" | "tuple" | "dict"
    graph_key: str
    route: str
    seconds: dict = field(default_factory=dict)
    dims: dict = field(default_factory=dict)  # symbol -> {"min": m, "max": M or None}
    # (exception name, message) per index check: the module's last result
    # holds their flags (``export/dynamic.py``); the artifact raises for a set one
    checks: list = field(default_factory=list)
    stage: str = "linalg"  # what ``linalg`` holds: linalg, or torch-backend (dynamic.py)

    @property
    def inputs(self) -> list[TensorInfo]:
        return [a for a in self.args if isinstance(a, TensorInfo)]

    @property
    def stored(self) -> list[tuple[str, torch.Tensor]]:
        return [a for a in self.args if not isinstance(a, TensorInfo)]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32`` (numpy's names, plus ``bfloat16``)."""
    return str(dtype).removeprefix("torch.")


# -- what to capture ----------------------------------------------------------

def module_state(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers, by their state_dict names (a tensor shared by
    two names appears once), as detached host tensors."""
    out, seen = [], set()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append((name, t.detach().cpu()))
    return out


def input_names(fn, n: int, given=None) -> list[str]:
    """Names of ``fn``'s first ``n`` positional parameters (``input<i>`` for
    ``*args``), or ``given``."""
    if given is not None:
        names = list(given)
        if len(names) != n:
            raise ExportError(f"lazy-mlir: {n} example inputs but {len(names)} input names")
        return names
    names = []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            break
    names = names[:n]
    names += [f"input{i}" for i in range(len(names), n)]
    if len(set(names)) != n:
        names = [f"input{i}" for i in range(n)]
    return names


def _as_function(module_or_fn, state):
    """(callable of (*state, *inputs), the callable whose signature names the inputs)."""
    if isinstance(module_or_fn, torch.nn.Module):
        module = module_or_fn
        keys = [k for k, _ in state]

        def flat(*args):
            return torch.func.functional_call(module, dict(zip(keys, args[:len(keys)])),
                                              tuple(args[len(keys):]))
        return flat, module.forward
    if not callable(module_or_fn):
        raise ExportError("lazy-mlir: export takes an nn.Module or a function of tensors, "
                          f"not {type(module_or_fn).__name__}")
    return module_or_fn, module_or_fn


def _structure(tree) -> tuple[str, list[str]]:
    """How outputs are returned, and their names, from a pytree spec."""
    if tree.is_leaf():
        return "single", ["output"]
    children = tree.children() if hasattr(tree, "children") else tree.children_specs
    if tree.type is dict and all(c.is_leaf() for c in children):
        return "dict", [str(k) for k in tree.context]
    return "tuple", [f"output{i}" for i in range(tree.num_leaves)]


def refuse_host_reads(before: dict, what: str) -> None:
    """``ExportError`` if ops read values on the host or ran eagerly since ``before``."""
    changed = metrics.changed_since(before)
    if changed:
        syncs = [n[6:] for n in changed if n.startswith("sync::")]
        eager = [n[6:] for n in changed if n.startswith("aten::")]
        why = []
        if syncs:
            why.append(f"reads tensor values on the host ({', '.join(syncs)}), e.g. "
                       "`.item()` or `if tensor:`")
        if eager:
            why.append(f"runs ops the compiler does not take eagerly ({', '.join(eager)})")
        raise ExportError(f"lazy-mlir: {what} {' and '.join(why)} while being captured; "
                          "the artifact would keep the values seen at export time. Make "
                          "the computation tensor-only (torch.where instead of if, no .item())")


# -- the lazy route -------------------------------------------------------------

def capture_lazy(module_or_fn, example_args: tuple, config, names=None,
                 target=None) -> Captured:
    """Capture with ``lm.jit`` on the lazy device (static shapes), lowered
    for ``target`` (a ``Target``; default the current one) as mark_step
    lowers for it."""
    from ..lazy.sync import host_of
    from ..frontends.jit import jit
    state = module_state(module_or_fn) if isinstance(module_or_fn, torch.nn.Module) else []
    flat, named = _as_function(module_or_fn, state)
    names = input_names(named, len(example_args), names)
    t0 = time.perf_counter()
    before = metrics.host_reads()
    lowered = jit(flat).lower(*[t for _, t in state], *example_args, target=target,
                              config=config)
    refuse_host_reads(before, "the function")
    graph = lowered.graph
    args: list = list(state)
    args += [TensorInfo(n, a.dtype, tuple(a.shape)) for n, a in zip(names, example_args)]
    for i, d in enumerate(graph.inputs[lowered.n_args:]):
        args.append((f"const.{i}", host_of(d).detach().clone()))
    kind, out_names = _structure(lowered.out_tree)
    outputs = [TensorInfo(n, v.spec.dtype, v.spec.shape)
               for n, v in zip(out_names, graph.outputs)]
    text = lowered.as_text("linalg")
    return Captured(text, args, outputs, kind, graph.key, "lazy",
                    {"capture+lower": time.perf_counter() - t0})


# -- sizes chosen at run time (``dynamic.py``) ------------------------------------

def check_dynamic_dims(dynamic_dims: dict, names: list[str], examples: tuple):
    """``{input name: {axis: symbol}}`` validated against the inputs, where a
    symbol is a name or (name, min[, max]); returns ({input: {axis: name}},
    {name: (min, max or None)}). A name used twice is one size."""
    if not isinstance(dynamic_dims, dict):
        raise ExportError("lazy-mlir: dynamic_dims must be {input name: {axis: symbol}}, "
                          'e.g. {"x": {0: "batch"}}')
    out, ranges = {}, {}
    for name, axes in dynamic_dims.items():
        if name not in names:
            raise ExportError(f"lazy-mlir: dynamic_dims names {name!r}, which is not an "
                              f"input; inputs: {', '.join(names)}")
        t = examples[names.index(name)]
        if not isinstance(axes, dict):
            raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}] must be {{axis: symbol}}")
        for axis, spec in axes.items():
            if not isinstance(axis, int) or not -t.dim() <= axis < t.dim():
                raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}]: axis {axis!r} is out "
                                  f"of range for a {t.dim()}-d input")
            sym, lo, hi = (spec, 1, None) if isinstance(spec, str) else \
                (tuple(spec) + (1, None))[:3] if isinstance(spec, (tuple, list)) and \
                len(spec) in (2, 3) else (None, 1, None)
            if not isinstance(sym, str) or not _SYMBOL.fullmatch(sym) or \
                    not isinstance(lo, int) or lo < 1 or \
                    (hi is not None and (not isinstance(hi, int) or hi < lo)):
                raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}][{axis}]: {spec!r} must "
                                  "be a name such as 'batch', or (name, min) / (name, min, "
                                  "max) with 1 <= min <= max")
            if ranges.setdefault(sym, (lo, hi)) != (lo, hi):
                raise ExportError(f"lazy-mlir: dynamic_dims gives {sym!r} two ranges")
            out.setdefault(name, {})[axis % t.dim()] = sym
    return out, ranges
