"""Foreach ops (``torch._foreach_*``) as their per-tensor ops.

A foreach op applies one op to every tensor of a list; PyTorch's CPU kernels
do exactly that, one tensor after the other (the "slow path"). ``plan(func)``
says how a foreach overload maps to its per-tensor op and ``element_calls``
lists the per-tensor calls; capture uses them (``lazy/foreach.py``) and so
does the IMPORT-scope decomposition registered here: capture records a
functional foreach op on lazy tensors as ONE graph node (an optimizer's
update is then a dozen nodes, not a dozen per parameter), and that node
becomes its per-tensor ops on the fx graph before torch-mlir imports it.

The per-tensor op is found by name: ``_foreach_add_.List`` -> ``aten.add_``,
called through the overload packet so that PyTorch's own schema matching picks
the Tensor or Scalar overload for each element's arguments. List arguments
(``Tensor[]``, ``Scalar[]``) give their i-th element, everything else is
passed to every call. A few ops differ from their per-tensor op and are
mapped explicitly (``_REDIRECT``, ``_VALUE_ARG``); an in-place op with no
in-place per-tensor op (``maximum_``) computes the functional one and copies it
into the element, as PyTorch's kernel does.
"""
from __future__ import annotations

import functools

import torch

from .registry import IMPORT, register_decomposition

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


class Plan:
    """How one foreach overload maps to its per-tensor op."""

    __slots__ = ("op", "inplace", "via_copy", "names", "lists", "keyword", "kwarg_only",
                 "defaults", "tensor_scalars", "base")

    def __init__(self, op, inplace, schema, base, via_copy):
        self.op = op  # an OpOverloadPacket
        self.base = base  # "add" for _foreach_add_.List
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

    def bind(self, args, kwargs) -> dict:
        """Argument name -> value, defaults filled in."""
        bound = dict(self.defaults)
        bound.update(zip(self.names, args))
        bound.update(kwargs)
        return bound


@functools.lru_cache(maxsize=None)
def plan(func):
    """The ``Plan`` of a foreach op, or a string saying why there is none."""
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
    return Plan(packet, inplace, func._schema, base, via_copy)


def length(func, how: Plan, bound: dict) -> int:
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


def element_calls(how: Plan, bound: dict, n: int):
    """(positional, keyword) arguments of the per-tensor op for each element
    (``bound``'s per-element scalars already a list)."""
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
        yield pos, kw


# The functional foreach ops torch.optim and clip_grad_norm_ use, recorded as
# one node each (``lazy/foreach.py``) and decomposed here before import.
WHOLE_NODE_BASES = frozenset({
    "add", "sub", "mul", "div", "lerp", "addcmul", "addcdiv", "pow", "sqrt", "neg",
    "reciprocal", "maximum", "minimum", "clamp_min", "clamp_max", "abs", "exp", "sign",
    "zero", "copy",
})


def whole_node_ops() -> list:
    """The functional overloads of ``WHOLE_NODE_BASES`` that have a plan and
    no per-element scalars read from a tensor."""
    out = []
    for base in sorted(WHOLE_NODE_BASES):
        packet = getattr(aten, PREFIX + base, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            func = getattr(packet, overload)
            how = plan(func)
            if not isinstance(how, str) and not how.inplace and not how.tensor_scalars:
                out.append(func)
    return out


def _stackable(how: Plan, bound: dict) -> bool:
    """Every tensor argument is a list of 0-dim tensors of one dtype (the
    other arguments numbers, bools or None): the op may then run once on
    the lists stacked, with the same types as per element (a 0-dim tensor
    and a [n] one promote alike against numbers)."""
    dtype = None
    for arg in how.names:
        v = bound[arg]
        if arg in how.lists:
            for t in v:
                if not isinstance(t, torch.Tensor) or t.dim() != 0:
                    return False
                if dtype is None:
                    dtype = t.dtype
                elif t.dtype != dtype:
                    return False
        elif isinstance(v, torch.Tensor):
            return False
    return dtype is not None


def _stacked(how: Plan, bound: dict, n: int) -> list:
    """The op once over the stacked lists, unbound into n 0-dim results.
    Per element, n 0-dim ops stand side by side, and IREE gathers adjacent
    scalar ops into one dispatch binding every input and output: an
    optimizer's ``_foreach_add_(steps, 1)`` over 32 parameters binds 64
    buffers, past what a dispatch may have (the module fails to load)."""
    stacked = dict(bound)
    for arg in how.lists:
        stacked[arg] = [torch.stack(list(bound[arg]))]
    pos, kw = next(element_calls(how, stacked, 1))
    return list(how.op(*pos, **kw).unbind())


def _decomposition(func):
    how = plan(func)

    def per_tensor(*args, **kwargs):
        bound = how.bind(args, kwargs)
        n = length(func, how, bound)
        if n > 1 and _stackable(how, bound):
            return _stacked(how, bound, n)
        return [how.op(*pos, **kw) for pos, kw in element_calls(how, bound, n)]
    per_tensor.__qualname__ = f"per_tensor[{func}]"
    return per_tensor


for _op in whole_node_ops():
    register_decomposition(_op, scope=IMPORT)(_decomposition(_op))
