"""Foreach ops (``torch._foreach_*``) recorded as per-tensor graph ops.

Optimizers with ``foreach=True``, ``clip_grad_norm_(foreach=True)`` and
direct ``torch._foreach_*`` calls apply one op to every tensor of a list.
PyTorch's CPU kernels do exactly that, one tensor after the other (the "slow
path"); here each element becomes the per-tensor aten op on lazy tensors:

- ``_foreach_X(lists...)`` returns ``[X(a_i, b_i, ...)]``, new lazy tensors;
- ``_foreach_X_(lists...)`` calls ``X_(a_i, b_i, ...)`` for i in order, so each
  write goes through capture's in-place path (views and aliases see it, and a
  later element sees an earlier element's write, as in eager).

The per-tensor op is found by name: ``_foreach_add_.List`` -> ``aten.add_``,
called through the overload packet so that PyTorch's own schema matching picks
the Tensor or Scalar overload for each element's arguments. List arguments
(``Tensor[]``, ``Scalar[]``) give their i-th element, everything else is
passed to every call. A few ops differ from their per-tensor op and are
mapped explicitly (``_REDIRECT``, ``_VALUE_ARG``); an in-place op with no
in-place per-tensor op (``maximum_``) computes the functional one and copies it
into the element, as PyTorch's kernel does. Ops with no per-tensor op
(``_foreach_powsum``, ``out=`` overloads), and per-element scalars given as a
lazy tensor, run eagerly on host copies: counted as ``aten::<op>`` fallbacks
and written back into the lazy tensors, never silently.
"""
from __future__ import annotations

import functools

import torch

from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import metrics
from .capture import assign, data_value
from .state import dry_run as _dry_run
from .supported import note_fallback
from .sync import to_host
from .tensor import LazyTensor, wrap_value

aten = torch.ops.aten
PREFIX = "_foreach_"

# Foreach ops whose per-tensor op has another name, by (base name, overload).
# PyTorch's CPU kernels implement maximum/minimum with a scalar as
# clamp_min/clamp_max (maximum has no Scalar overload), and the norm as
# linalg_vector_norm(t, ord, dtype=dtype).
_REDIRECT = {
    ("maximum", "Scalar"): "clamp_min", ("maximum", "ScalarList"): "clamp_min",
    ("minimum", "Scalar"): "clamp_max", ("minimum", "ScalarList"): "clamp_max",
    ("norm", "Scalar"): "linalg_vector_norm",
}
# Arguments that the per-tensor op takes by keyword although the foreach op
# takes them by position: {base name: {foreach argument: per-tensor keyword}}.
_VALUE_ARG = {"addcdiv": {"value": "value", "scalars": "value"},
              "addcmul": {"value": "value", "scalars": "value"},
              "norm": {"dtype": "dtype"}}


class _Plan:
    """How one foreach overload maps to its per-tensor op."""

    __slots__ = ("op", "inplace", "via_copy", "names", "lists", "keyword", "kwarg_only",
                 "defaults", "tensor_scalars")

    def __init__(self, op, inplace, schema, base, via_copy):
        self.op = op  # an OpOverloadPacket
        self.inplace = inplace
        self.via_copy = via_copy  # in place as op(...) then self.copy_(result)
        args = schema.arguments
        self.names = [a.name for a in args]
        self.lists = {a.name for a in args if isinstance(a.type, torch.ListType)}
        self.kwarg_only = {a.name for a in args if a.kwarg_only}
        self.keyword = _VALUE_ARG.get(base, {})
        self.defaults = {a.name: a.default_value for a in args if a.has_default_value()}
        # addcdiv.Tensor / addcmul.Tensor: one scalar per element, as a 1-D tensor
        self.tensor_scalars = {a.name for a in args
                               if a.name == "scalars" and not isinstance(a.type, torch.ListType)}


@functools.lru_cache(maxsize=None)
def plan(func):
    """The ``_Plan`` of a foreach op, or a string saying why there is none."""
    name = func._schema.name.split("::")[-1]
    overload = func._overloadname
    if not name.startswith(PREFIX):
        return "not a foreach op"
    if "out" in overload.split("_") or overload == "out":
        return "an out= overload"
    inplace = name.endswith("_")
    base = name[len(PREFIX):].rstrip("_")
    target = _REDIRECT.get((base, overload), base)
    packet = getattr(aten, target + "_" if inplace else target, None)
    via_copy = False
    if inplace and not isinstance(packet, torch._ops.OpOverloadPacket):
        # maximum_/minimum_ do not exist: PyTorch's kernel computes
        # maximum(a, b) and copies it into a; so do we (copy_ is in place).
        packet, via_copy = getattr(aten, target, None), True
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return f"no per-tensor op aten.{target}{'_' if inplace else ''}"
    return _Plan(packet, inplace, func._schema, base, via_copy)


def dispatch(func, args, kwargs):
    """Run a foreach op on lazy tensors as its per-tensor ops."""
    how = plan(func)
    name = func.__name__.split(".")[0]
    if isinstance(how, str):
        return run_eagerly(func, args, kwargs, how)
    bound = dict(how.defaults)
    bound.update(zip(how.names, args))
    bound.update(kwargs)
    n = _length(func, how, bound)
    for s in how.tensor_scalars:
        if isinstance(bound[s], LazyTensor):  # its values are needed on the host
            return run_eagerly(func, args, kwargs, "per-element scalars in a lazy tensor")
        bound[s] = _scalar_list(bound[s], n)
    metrics.counter_inc("lazy::" + name)
    results = []
    for i in range(n):
        pos, kw = [], {}
        for arg in how.names:
            v = bound[arg]
            if arg in how.lists or arg in how.tensor_scalars:
                v = v[i]
            if arg in how.keyword:
                kw[how.keyword[arg]] = v
            elif arg in how.kwarg_only:
                kw[arg] = v
            else:
                pos.append(v)
        out = how.op(*pos, **kw)
        if how.via_copy:
            aten.copy_(pos[0], out)
        results.append(out)
    return None if how.inplace else results


def _length(func, how, bound) -> int:
    """The common length of the list arguments; raises as PyTorch does when
    they differ."""
    lengths = [(a, len(bound[a])) for a in how.names if a in how.lists]
    n = lengths[0][1]
    if n == 0:
        raise RuntimeError(f"{func}: Tensor list must have at least one tensor.")
    for a, m in lengths[1:]:
        if m != n:
            raise RuntimeError(f"{func}: the lists {lengths[0][0]} and {a} must have the same "
                               f"number of elements, got {n} and {m}")
    return n


def _scalar_list(t: torch.Tensor, n: int) -> list:
    """A host tensor of per-element scalars as Python numbers (PyTorch's
    ``convert_tensor_to_scalar_list``: 1-D with one value per list element)."""
    if t.dim() != 1 or t.numel() != n:
        raise RuntimeError(f"Expected scalars to be a 1-D tensor of size {n}, got {tuple(t.shape)}")
    return t.tolist()


def run_eagerly(func, args, kwargs, why: str):
    """Run ``func`` on host copies of its lazy arguments, then write every
    argument it writes back into the lazy tensors, list elements included
    (``fallback.run_eagerly`` writes only top-level tensor arguments). For
    foreach ops without a per-tensor mapping, and for capture's other ops
    that return nothing but write their arguments
    (``_amp_foreach_non_finite_check_and_unscale_``, ``_fused_adam_``)."""
    if _dry_run[0] is not None:  # lm.check_coverage: record it, run nothing
        return _dry_run[0].stand_in(func, args, kwargs, why)
    note_fallback(func.__name__.split(".")[0], why)
    flat, tree = tree_flatten((args, kwargs))
    host = [to_host(a).clone() if isinstance(a, LazyTensor) else a for a in flat]
    hargs, hkwargs = tree_unflatten(host, tree)
    out = func(*hargs, **hkwargs)
    names = [a.name for a in func._schema.arguments]
    bound_lazy = dict(zip(names, args), **kwargs)
    bound_host = dict(zip(names, hargs), **hkwargs)
    for a in func._schema.arguments:
        if a.alias_info and a.alias_info.is_write:
            lazy_v, host_v = bound_lazy.get(a.name), bound_host.get(a.name)
            pairs = zip(lazy_v, host_v) if isinstance(lazy_v, (list, tuple)) else [(lazy_v, host_v)]
            for lz, h in pairs:
                if isinstance(lz, LazyTensor):
                    assign(lz, data_value(h))
    if out is None:
        return None
    leaves, out_tree = tree_flatten(out)
    return tree_unflatten([wrap_value(data_value(o)) if isinstance(o, torch.Tensor) else o
                           for o in leaves], out_tree)
