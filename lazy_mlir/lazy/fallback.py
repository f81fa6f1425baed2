"""Eager fallback: ops the compiler cannot take run on the host CPU.

Inputs are materialized, the op runs eagerly, and its results come back as
lazy device data. Each fallback counts ``aten::<op>``; the first one of each
op logs a warning naming it (``supported.note_fallback``).
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .capture import assign, data_value
from .state import dry_run as _dry_run
from .supported import note_fallback
from .sync import to_host
from .tensor import LazyTensor, wrap_value


def run_eagerly(func, args, kwargs, why: str | None = None):
    """Run ``func`` on host copies of its lazy arguments; results are lazy."""
    if _dry_run[0] is not None:  # lm.check_coverage: record it, run nothing
        return _dry_run[0].stand_in(func, args, kwargs, why)
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
