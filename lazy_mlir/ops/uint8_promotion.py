"""8-bit integer operands: uint8 operands of ops that promote converted
first, and numbers beside an int8/uint8 tensor made 0-d tensors.

torch-mlir's lowering of an op whose operands have different types converts
each to the promoted type itself, and takes a uint8 operand as signed there:
``uint8 200 * 1.5`` gave -84.0, ``cat([uint8, float])`` and ``where(c,
uint8, float)`` -56.0, silently (fuzzer seed 68). ``.to`` converts uint8
exactly, so these ops get their uint8 operands converted to the promoted
type first. Chained above every other import decomposition of the op (this
module loads last: ``registry.DOMAINS``).
"""
from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten
DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT

_PROMOTING = [
    aten.cat.default, aten.stack.default, aten.where.self, aten.mul.Tensor, aten.div.Tensor,
    aten.div.Tensor_mode, aten.sub.Tensor, aten.add.Tensor, aten.maximum.default,
    aten.minimum.default, aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor,
    aten.gt.Tensor, aten.ge.Tensor, aten.atan2.default, aten.copysign.Tensor,
    aten.lerp.Tensor, aten.clamp.Tensor, aten.fmax.default, aten.fmin.default,
    aten.floor_divide.default, aten.pow.Tensor_Tensor,
    aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar,
    # An 8-bit tensor and a bool one (``torch.bitwise_and(uint8, bool)``):
    # the bool's conversion failed and the lowering built ``arith.andi`` on
    # a null value, SIGSEGV inside torch-mlir's pipeline, which ``lm.jit``
    # runs in the user's process (fuzzer seed 801424).
    aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor,
    aten.bitwise_left_shift.Tensor, aten.bitwise_right_shift.Tensor,
]


def _operands(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out += [t for t in a if isinstance(t, torch.Tensor)]
        elif isinstance(a, torch.Tensor) or (isinstance(a, (int, float)) and not isinstance(a, bool)):
            out.append(a)
    return out


def _uint8_promoted(op, below):
    """Operands converted to the computation type first where one is uint8
    and the type differs, or one is int8 beside another type (a bool: the
    lowering's conversion to i8 built an op on a null value, SIGSEGV;
    fuzzer seed 400076). ``where``'s condition stays as it is."""
    first = 1 if op is aten.where.self else 0

    def decomposition(*args, **kwargs):
        operands = _operands(args[first:])
        tensors = [t for t in operands if isinstance(t, torch.Tensor)]
        if len(operands) > 1 and any(t.dtype in _BYTES for t in tensors):
            # (the result dtype: the computation dtype of float16/bfloat16 is
            # float32, whose op returned float32 where eager's and the
            # recorded result is float16, and the next graph given that
            # buffer raised "element type mismatch"; fuzzer seed 940125)
            _, dtype = elementwise_dtypes(*operands, type_promotion_kind=DEFAULT)
            if any(t.dtype != dtype for t in tensors):
                def wide(a):
                    if isinstance(a, torch.Tensor) and a.dtype != dtype:
                        return aten._to_copy.default(a, dtype=dtype)
                    if isinstance(a, (list, tuple)):
                        return type(a)(wide(t) for t in a)
                    return a
                return op(*args[:first], *[wide(a) for a in args[first:]], **kwargs)
        return below(*args, **kwargs) if below is not None else NotImplemented
    return decomposition


for _op in _PROMOTING:
    register_decomposition(_op, scope=IMPORT, priority=20, overrides=True, chained=True)(
        _uint8_promoted)


# A number beside an 8-bit integer tensor (``.Scalar`` overloads: torch.compile
# graphs; the lazy device lifts numbers into tensors): torch-mlir converts the
# number to i8 without the original dtype its conversion needs and either
# raises ("for conversion to byte or char type dstOriginalDtype has to be
# passed") or builds an op on a null value: SIGSEGV, the process died
# (int8 ``x.mul_(7)`` under torch.compile; fuzzer seed 400079). The number as
# a 0-d tensor of eager's result type, and the ``.Tensor`` overload (a
# ``.Tensor`` overload given a number is imported as the ``.Scalar`` one).
_SCALAR_SIBLINGS = {
    aten.add.Scalar: aten.add.Tensor, aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor, aten.div.Scalar: aten.div.Tensor,
    aten.rsub.Scalar: aten.sub.Tensor, aten.remainder.Scalar: aten.remainder.Tensor,
    aten.fmod.Scalar: aten.fmod.Tensor, aten.eq.Scalar: aten.eq.Tensor,
    aten.ne.Scalar: aten.ne.Tensor, aten.lt.Scalar: aten.lt.Tensor,
    aten.le.Scalar: aten.le.Tensor, aten.gt.Scalar: aten.gt.Tensor,
    aten.ge.Scalar: aten.ge.Tensor,
}
_BYTES = (torch.int8, torch.uint8)


def _wrapped(number: int, dtype) -> int:
    """``number`` converted to an 8-bit ``dtype`` as eager converts it."""
    low = -128 if dtype == torch.int8 else 0
    return (number - low) % 256 + low


def _number_as_tensor(op, below):
    sibling = _SCALAR_SIBLINGS.get(op, op)

    def decomposition(x, other, *rest, **kwargs):
        if x.dtype in _BYTES and type(other) in (int, float, bool):  # (``x.mul_(True)``:
            # SIGSEGV as an int did, fuzzer seed 980301)
            dtype = torch.result_type(x, other)
            if dtype in _BYTES and type(other) is int:  # (eager wraps it: ``x > 300`` is ``x > 44``)
                other = _wrapped(other, dtype)
            number = aten.scalar_tensor.default(other, dtype=dtype, device=x.device)
            if rest:  # (``alpha``: positional in add/sub/rsub.Scalar, keyword-only in .Tensor)
                kwargs, rest = {**kwargs, "alpha": rest[0]}, ()
            if op is aten.rsub.Scalar:  # (other - alpha * x: the dialect has no rsub.Tensor)
                return sibling(number, x, *rest, **kwargs)
            return sibling(x, number, *rest, **kwargs)
        return below(x, other, *rest, **kwargs) if below is not None else NotImplemented
    return decomposition


for _op in (*_SCALAR_SIBLINGS, *set(_SCALAR_SIBLINGS.values())):
    register_decomposition(_op, scope=IMPORT, priority=15, overrides=True, chained=True)(
        _number_as_tensor)


def _wide_division(op, below):
    """Integer division with a rounding mode of 8-bit integers in int32,
    wrapped back (torch-mlir raised "for conversion to byte or char type
    dstOriginalDtype has to be passed"; fuzzer seeds 52, 400076): exact, as
    eager's 8-bit quotient is the int32 one wrapped (-128 // -1 too)."""
    def decomposition(x, other, *, rounding_mode=None):
        dtype = torch.result_type(x, other)
        if rounding_mode is None or dtype not in _BYTES:
            return below(x, other, rounding_mode=rounding_mode) if below else NotImplemented
        # (a number as eager converts it first: ``uint8_x // -3`` divides by 253)
        wide = [aten._to_copy.default(a, dtype=torch.int32) if isinstance(a, torch.Tensor)
                else _wrapped(a, dtype) if type(a) is int else a for a in (x, other)]
        return aten._to_copy.default(op(*wide, rounding_mode=rounding_mode), dtype=dtype)
    return decomposition


for _op in (aten.div.Tensor_mode, aten.div.Scalar_mode):
    register_decomposition(_op, scope=IMPORT, priority=12, overrides=True, chained=True)(
        _wide_division)


def _floor_divide(op, below):
    def decomposition(x, other):
        if torch.result_type(x, other) not in _BYTES:
            return below(x, other) if below else NotImplemented
        return aten.div.Tensor_mode(x, other, rounding_mode="floor")  # (wide, above)
    return decomposition


register_decomposition(aten.floor_divide.default, scope=IMPORT, priority=12, overrides=True,
                       chained=True)(_floor_divide)


def _bool_reduction(op, below):
    """``all``/``any`` of uint8 (a uint8 result, as eager's) on ``x != 0``:
    torch-mlir has no lowering of ``all.dim`` of uint8 and builds an invalid
    ``arith.ori`` for ``any.dim`` (lm.jit raised; fuzzer seed 78)."""
    def decomposition(x, *args, **kwargs):
        if x.dtype != torch.uint8:
            return below(x, *args, **kwargs) if below else NotImplemented
        truth = aten.ne.Scalar(x, 0)
        return aten._to_copy.default(op(truth, *args, **kwargs), dtype=torch.uint8)
    return decomposition


for _op in (aten.all.dim, aten.any.dim, aten.all.default, aten.any.default, aten.all.dims,
            aten.any.dims):
    register_decomposition(_op, scope=IMPORT, priority=12, overrides=True, chained=True)(
        _bool_reduction)


# Ops whose torch-mlir lowering takes a ui8 value as signed (ui8 is lowered as
# signless i8): they order or compare values (``max()`` of uint8 crashed the
# process; ``topk``, ``clamp`` picked 128-255 as negatives) or convert to a
# wider type inside the lowering (``x / 3``, ``reciprocal``, ``sum`` to int64
# took 200 as -56). In int32 (``_to_copy`` converts uint8 exactly), outputs
# eager gives as uint8 narrowed back. Every path imports through this table:
# the lazy device's graphs too (there a crash killed the compile worker and
# the graph ran eagerly). Issue 54.
_SIGNED_IN_LOWERING = [
    aten.max.default, aten.min.default, aten.max.dim, aten.min.dim, aten.amax.default,
    aten.amin.default, aten.aminmax.default, aten.topk.default, aten.sort.default,
    aten.kthvalue.default,  # (median, mode, cummax, ...: CAPTURE-decomposed into these)
    aten.scatter_reduce.two,
    aten.constant_pad_nd.default,  # (its float fill converted by fptosi to i8: IREE refused it)
    aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_min.Tensor,
    aten.clamp_max.default, aten.clamp_max.Tensor,
    aten.div.Tensor, aten.reciprocal.default,
    aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim,
    aten.prod.default, aten.prod.dim_int, aten.cumsum.default, aten.cumprod.default,
]
# Ops whose int numbers eager converts to the tensor's uint8 (``clamp(-3, 150)``
# clamps to [253, 150]): wrapped mod 256 before they meet int32 values.
_NUMBERS_AS_UINT8 = {aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default}


def _eager_dtypes(op, args, kwargs) -> list:
    """The dtypes of ``op``'s tensor outputs on the original operands (a
    fake-tensor run, not traced into the graph)."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with disable_proxy_modes_tracing():
        out = op(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.dtype if isinstance(o, torch.Tensor) else None for o in outs]


def _uint8_widened(op, below):
    def decomposition(*args, **kwargs):
        operands = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        if not any(t.dtype == torch.uint8 for t in operands):
            return below(*args, **kwargs) if below is not None else NotImplemented
        wrap = op in _NUMBERS_AS_UINT8

        def wide(a):
            if isinstance(a, torch.Tensor) and a.dtype == torch.uint8:
                return aten._to_copy.default(a, dtype=torch.int32)
            if wrap and type(a) is int:
                return a % 256
            return torch.int32 if a is torch.uint8 else a  # (``sum(dtype=uint8)``: narrowed after)
        dtypes = _eager_dtypes(op, args, kwargs)
        out = op(*[wide(a) for a in args], **{k: wide(v) for k, v in kwargs.items()})
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        outs = [aten._to_copy.default(o, dtype=d) if isinstance(o, torch.Tensor)
                and d is not None and o.dtype != d else o for o, d in zip(outs, dtypes)]
        return type(out)(outs) if isinstance(out, (tuple, list)) else outs[0]
    return decomposition


for _op in _SIGNED_IN_LOWERING:
    register_decomposition(_op, scope=IMPORT, priority=18, overrides=True, chained=True)(
        _uint8_widened)


def _converted_first(op, below):
    """A sum or product asked for an 8-bit ``dtype`` of an operand of another
    type converts the operand first, as eager does: torch-mlir's reduction
    converted it to ``i8`` without the original dtype its conversion needs
    and built an op on a null value, SIGSEGV (``torch.sum(int32_x, 0,
    out=int8_y)``, fuzzer seed 980880; ``lm.jit`` runs that pipeline in the
    user's process). 8-bit sums wrap as eager's do."""
    def decomposition(x, *args, **kwargs):
        dtype = kwargs.get("dtype")
        if dtype in _BYTES and x.dtype != dtype:
            return op(aten._to_copy.default(x, dtype=dtype), *args, **kwargs)
        return below(x, *args, **kwargs) if below is not None else NotImplemented
    return decomposition


for _op in (aten.sum.default, aten.sum.dim_IntList, aten.prod.default, aten.prod.dim_int):
    register_decomposition(_op, scope=IMPORT, priority=19, overrides=True, chained=True)(
        _converted_first)
