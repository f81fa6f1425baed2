"""The host-cost floor of any capture written as a Python ``__torch_dispatch__``
subclass: the same training step on a wrapper subclass that records nothing.

``NoOpTensor`` holds no data and no graph. Each op it sees is answered from a
memo keyed by (op, the specs of tensor arguments, the constants): output
shapes, strides and dtypes (from the meta kernel, the first time), wrapped in
new ``NoOpTensor``s; an in-place op returns its first argument. What a step
costs on it is what PyTorch charges anyway (the model's Python, autograd,
the dispatcher's calls into Python, one wrapper tensor per output) plus a
memo lookup per op: a lower bound for lazy-mlir's capture, which also keeps a
graph and reads views through their steps. Floats are keyed by type only (a
learning rate changes no output spec).

The model lives on the ``meta`` device under the wrappers; the optimizer is
the suite's AdamW with ``foreach=True`` and ``capturable=False`` (PyTorch
refuses ``capturable`` on ``meta``): its update is a few foreach ops fewer
than lazy-mlir's capturable one.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.utils._pytree import tree_map

from _harness import cycling_step  # (beside this file: plain_loop puts it on sys.path)

_memo: dict = {}


class NoOpTensor(torch.Tensor):
    @staticmethod
    def __new__(cls, spec):
        shape, stride, offset, dtype = spec
        t = torch.Tensor._make_wrapper_subclass(cls, shape, strides=stride, storage_offset=offset,
                                                dtype=dtype, device="meta")
        t.spec = spec
        return t

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        parts = [func]
        for a in (*args, *kwargs.values()):
            for x in (a if type(a) in (list, tuple) else (a,)):
                t = type(x)
                parts.append(x.spec if t is NoOpTensor else
                             (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else
                             float if t is float else x)
        try:
            key = tuple(parts)
            plan = _memo.get(key)
        except TypeError:  # an unhashable constant
            key, plan = None, None
        if plan is None:
            plan = _plan(func, args, kwargs)
            if key is not None:
                _memo[key] = plan
        how, specs = plan
        if how == "self":
            return args[0]
        if how == "none":
            return None
        outs = [NoOpTensor(s) if s is not None else None for s in specs]
        return outs[0] if how == "one" else outs if how == "list" else tuple(outs)


def _spec(t: torch.Tensor):
    return (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)


def _plan(func, args, kwargs):
    def meta(a):
        if isinstance(a, torch.Tensor):
            return torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device="meta")
        return a
    margs, mkwargs = tree_map(meta, (args, kwargs))
    out = func(*margs, **mkwargs)
    rets = func._schema.returns
    if out is None:
        return "none", None
    if isinstance(out, torch.Tensor):
        if rets and rets[0].alias_info is not None and rets[0].alias_info.is_write:
            return "self", None  # add_, copy_, zero_, ...
        return "one", [_spec(out)]
    return ("list" if isinstance(out, list) else "tuple",
            [_spec(o) if isinstance(o, torch.Tensor) else None for o in out])


def wrap(t: torch.Tensor) -> NoOpTensor:
    return NoOpTensor(_spec(t))


def floor_loop(rm):
    """The plain loop's step (``zero_grad``, loss, ``backward``, ``step``)
    for the suite model ``rm`` on ``NoOpTensor``s; returns ``step()``."""
    model = rm.make()
    params: dict = {}  # id -> its wrapper (tied weights stay tied)
    for m in model.modules():
        for k, p in list(m._parameters.items()):
            if p is not None:
                if id(p) not in params:
                    params[id(p)] = nn.Parameter(wrap(p.data), requires_grad=p.requires_grad)
                m._parameters[k] = params[id(p)]
        for k, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[k] = wrap(b)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    batches = [{k: wrap(v) for k, v in rm.batch(i).items()} for i in range(2)]
    return cycling_step(rm, model, opt, batches)
