"""Eager fallback: ops the compiler cannot take run on the host CPU.

Inputs are materialized, the op runs eagerly, and its results come back as
lazy device data. Each fallback counts ``aten::<op>``; the first one of each
op logs a warning naming it.
"""
from __future__ import annotations

import logging

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import metrics
from ..graph.ir import Value

log = logging.getLogger("lazy_mlir")
_warned: set[str] = set()

# dtypes the pipeline does not lower (complex and quantized types).
UNSUPPORTED_DTYPES = {torch.complex32, torch.complex64, torch.complex128, torch.qint8,
                      torch.quint8, torch.qint32, torch.quint4x2,
                      torch.float8_e4m3fn, torch.float8_e5m2}


def supported(func, values) -> bool:
    """True when ``func`` on these arguments can be compiled."""
    from ..ops.support import op_is_supported
    return op_is_supported(func) and dtypes_supported(values)


def dtypes_supported(values) -> bool:
    """No argument is complex (or of another dtype the pipeline does not lower)."""
    for v in values:
        if isinstance(v, Value) and v.spec.dtype in UNSUPPORTED_DTYPES:
            return False
        if isinstance(v, complex):
            return False
    return True


def note_fallback(name: str, why: str) -> None:
    metrics.counter_inc("aten::" + name)
    if name not in _warned:
        _warned.add(name)
        log.warning("lazy-mlir: aten::%s runs eagerly on the CPU (%s); it is counted "
                    "as a fallback in lm.metrics", name, why)


def run_eagerly(func, args, kwargs, why: str | None = None):
    """Run ``func`` on host copies of its lazy arguments; results are lazy."""
    from .capture import assign, data_value
    from .sync import to_host
    from .tensor import LazyTensor, wrap_value
    from .coverage import active
    if active() is not None:  # lm.check_coverage: record it, run nothing
        return active().stand_in(func, args, kwargs, why)
    note_fallback(func.__name__.split(".")[0], why or "not supported by the compiler")
    flat, tree = tree_flatten((args, kwargs))
    host = [to_host(a).clone() if isinstance(a, LazyTensor) else
            (torch.device("cpu") if isinstance(a, torch.device) and a.type == "lazy" else a)
            for a in flat]
    hargs, hkwargs = tree_unflatten(host, tree)
    out = func(*hargs, **hkwargs)
    # In-place and out= ops wrote into host copies: write those back.
    for lazy_arg, host_arg, schema_arg in zip(args, hargs, func._schema.arguments):
        if schema_arg.alias_info and schema_arg.alias_info.is_write and isinstance(lazy_arg, LazyTensor):
            assign(lazy_arg, data_value(host_arg))
    for name, t in kwargs.items():
        if isinstance(t, LazyTensor) and isinstance(hkwargs.get(name), torch.Tensor):
            assign(t, data_value(hkwargs[name]))
    if func._schema.is_mutable and func._schema.returns and func._schema.returns[0].alias_info:
        return args[0] if not kwargs.get("out") is not None else kwargs["out"]
    leaves, out_tree = tree_flatten(out)
    wrapped = [wrap_value(data_value(o)) if isinstance(o, torch.Tensor) else o for o in leaves]
    return tree_unflatten(wrapped, out_tree)
