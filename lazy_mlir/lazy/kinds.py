"""What kind of op an aten overload is, as capture routes it.

``kind(func)`` sorts an op into one of: "special" (capture has its own
handler, ``SPECIAL_OPS``), "collective" (``torch.ops._c10d_functional`` and
``torch.ops.c10d``: collectives.py), "foreach", "sync" (returns no tensor),
"view", "inplace_view", "mutating" or "functional". Facts of the schema only: each
answer is cached for the process.
"""
from __future__ import annotations

import functools

import torch

from .views import is_inplace_view_op, is_view_op

aten = torch.ops.aten

# Random fills: drawn on the host from PyTorch's CPU generator (dispatch._random).
RANDOM = [aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float,
          aten.bernoulli_.Tensor, aten.random_.default, getattr(aten.random_, "from"),
          aten.random_.to, aten.exponential_.default, aten.geometric_.default,
          aten.log_normal_.default, aten.cauchy_.default]

# Ops the router handles itself (dispatch._SPECIAL has exactly these keys).
SPECIAL_OPS = frozenset([
    aten.copy_.default, aten._to_copy.default, aten.native_dropout.default,
    aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit_no_training.default,
    aten.resize_.default, aten.resize_as_.default, *RANDOM,
    # torch.optim's fused updates: one node each (fused_optim.py)
    aten._fused_adam_.default, aten._fused_adam_.tensor_lr, aten._fused_adamw_.default,
    aten._fused_adamw_.tensor_lr, aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr,
    aten._pack_padded_sequence.default,  # host lengths (packed.py)
    aten.roll.default,  # by a runtime shift (offsets.roll)
    aten.multinomial.default])  # checked on the host, drawn as ATen draws (multinomial.py)


@functools.lru_cache(maxsize=None)
def kind(func) -> str:
    schema = func._schema
    if func in SPECIAL_OPS:
        return "special"
    if schema.name.startswith(("_c10d_functional::", "c10d::")):  # cut points (collectives.py)
        return "collective"
    if schema.name.startswith("aten::_foreach_"):  # lists in, lists or nothing out
        return "foreach"
    if not any(isinstance(r.type, torch.TensorType) or "Tensor" in str(r.type)
               for r in schema.returns):
        return "sync"
    if is_inplace_view_op(func):
        return "inplace_view"
    if is_view_op(func):
        return "view"
    if schema.is_mutable:
        return "mutating"
    return "functional"


@functools.lru_cache(maxsize=None)
def functional_of(func):
    """``add_.Tensor`` -> ``add.Tensor`` (None when there is no such overload).
    Matched by the arguments, not only the overload name: ``pow_.Scalar`` is
    ``pow.Tensor_Scalar`` (``pow.Scalar`` is ``Scalar ** Tensor``), and so are
    ``float_power_.Scalar`` and ``ldexp_``."""
    packet = getattr(aten, func.__name__.split(".")[0].rstrip("_"), None)
    if packet is None:
        return None
    want = _arguments(func)
    names = [func._overloadname] + [n for n in packet.overloads() if n != func._overloadname]
    for name in names:
        if name in packet.overloads() and _arguments(getattr(packet, name)) == want:
            return getattr(packet, name)
    return None


def _arguments(func) -> tuple:
    return tuple((a.name, str(a.type)) for a in func._schema.arguments)


@functools.lru_cache(maxsize=None)
def written_args(func) -> tuple[str, ...]:
    """The names of the arguments ``func`` writes."""
    return tuple(a.name for a in func._schema.arguments if a.alias_info and a.alias_info.is_write)
