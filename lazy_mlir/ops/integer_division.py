"""Integer division as eager computes it (import time).

- ``floor_divide`` / ``div(rounding_mode='floor')`` of signed integers:
  torch-mlir divides int64 in float64, so quotients past 2**53 came back
  rounded (``x // 3`` of 2**62 + 1 was off by 85, silently; fuzzer seed
  801059), and its folder of a constant truncates (``full_like(x, 2) // -3``
  of int8 gave 0 for -1 under torch.compile, silently; seed 900251). Here
  the truncating division, which torch-mlir keeps in integers, less one
  where the remainder is not 0 and its sign is not the divisor's.
- A divisor of -1: the smallest integer divided by -1 overflows, and the
  x86 ``idiv`` the kernel compiles to traps (SIGFPE: the process died).
  Eager's floor division wraps (``-2**63 // -1`` is ``-2**63``) and its
  remainder is 0; here the kernel divides by 1 where the divisor is -1 and
  selects ``-x`` (wrapping) or 0 there. (A divisor of 0 is checked at
  capture: ``lazy.bounds.DIVISIONS``.)
- ``remainder``/``fmod`` by a number (any dtype): as by a 0-d tensor, so
  that torch-mlir's folder of the ``.Scalar`` op never sees a constant.
"""
from __future__ import annotations

import torch

from .registry import IMPORT, ReentryGuard, register_decomposition

aten = torch.ops.aten
_inside = ReentryGuard()  # set while the -1 guard traces the division itself

_SIGNED = (torch.int64, torch.int32, torch.int16, torch.int8)
_FLOOR_DIVIDE = (aten.floor_divide.default, aten.floor_divide.Scalar)
_MODES = (aten.div.Tensor_mode, aten.div.Scalar_mode)
_REMAINDERS = (aten.remainder.Tensor, aten.remainder.Scalar, aten.fmod.Tensor, aten.fmod.Scalar)


def _integer_mode(op, x, other, kwargs):
    """The rounding of ``op`` when it divides integers ("floor", "trunc", or
    "remainder"), else None (true division, a float or unsigned result)."""
    if not isinstance(x, torch.Tensor) or torch.result_type(x, other) not in _SIGNED:
        return None
    if op in _FLOOR_DIVIDE:
        return "floor"
    if op in _MODES:
        return kwargs.get("rounding_mode")
    return "remainder"


def _exact_floor_division(op, below):
    def decomposition(x, other, **kwargs):
        if _integer_mode(op, x, other, kwargs) != "floor":
            return below(x, other, **kwargs) if below else NotImplemented
        dtype = torch.result_type(x, other)
        if isinstance(other, torch.Tensor):
            q = aten.div.Tensor_mode(x, other, rounding_mode="trunc")
            r = aten.sub.Tensor(x, aten.mul.Tensor(q, other))
            off_sign = aten.ne.Tensor(aten.lt.Scalar(r, 0), aten.lt.Scalar(other, 0))
        else:
            q = aten.div.Scalar_mode(x, other, rounding_mode="trunc")
            r = aten.sub.Tensor(x, aten.mul.Scalar(q, other))
            off_sign = aten.gt.Scalar(r, 0) if other < 0 else aten.lt.Scalar(r, 0)
        fix = aten.logical_and.default(aten.ne.Scalar(r, 0), off_sign)
        return aten.sub.Tensor(q, aten._to_copy.default(fix, dtype=dtype))
    return decomposition


def _divisor_minus_one(op, below):
    def decomposition(x, other, **kwargs):
        mode = None if _inside.active else _integer_mode(op, x, other, kwargs)
        if mode is None or not (isinstance(other, torch.Tensor) or other == -1):
            return below(x, other, **kwargs) if below else NotImplemented
        dtype = torch.result_type(x, other)
        wide = aten._to_copy.default(x, dtype=dtype)  # (promoted first: -x of int32 in int64)
        at_minus_one = aten.neg.default(wide) if mode != "remainder" else aten.mul.Scalar(wide, 0)
        if not isinstance(other, torch.Tensor):  # x / -1: no division at all
            return at_minus_one
        minus_one = aten.eq.Scalar(other, -1)
        safe = aten.where.ScalarSelf(minus_one, 1, other)
        with _inside:  # (the divisions traced below need no second guard)
            divided = below(x, safe, **kwargs) if below else NotImplemented
            if divided is NotImplemented:
                divided = op(x, safe, **kwargs)
        return aten.where.self(minus_one, at_minus_one, divided)
    return decomposition


for _op in (*_MODES, *_FLOOR_DIVIDE):
    register_decomposition(_op, scope=IMPORT, priority=13, overrides=True, chained=True)(
        _exact_floor_division)
for _op in (*_MODES, *_FLOOR_DIVIDE, *_REMAINDERS):
    register_decomposition(_op, scope=IMPORT, priority=14, overrides=True, chained=True)(
        _divisor_minus_one)


# ``remainder``/``fmod`` of a tensor by a number: torch-mlir folds the
# ``.Scalar`` op of a constant tensor with C's fmod (``torch.full((3,), -3.5)
# % 2`` gave -1.5 for eager's 0.5, silently; ``fmod`` left a literal that did
# not legalize). The number as a 0-d tensor of the result type: ``.Tensor``
# has no such folder. Under the 8-bit and -1 divisor rules above it
# (``uint8_promotion`` and ``_divisor_minus_one`` wrap it).
_MOD_SIBLINGS = {aten.remainder.Scalar: aten.remainder.Tensor, aten.fmod.Scalar: aten.fmod.Tensor}


def _mod_by_0d(op, below):
    def decomposition(x, other):
        if type(other) in (int, float) and x.dtype not in (torch.uint8, torch.int8, torch.bool) \
                and not x.is_complex():
            number = aten.scalar_tensor.default(other, dtype=torch.result_type(x, other),
                                                device=x.device)
            return _MOD_SIBLINGS[op](x, number)
        return below(x, other) if below is not None else NotImplemented
    return decomposition


for _op in _MOD_SIBLINGS:
    register_decomposition(_op, scope=IMPORT, priority=12, overrides=True, chained=True)(_mod_by_0d)

