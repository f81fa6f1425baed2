"""Elementwise ops whose compiled form answers differently from eager.

IEEE/C99 special values (import time).

torch-mlir lowers float ``pow`` to ``math.powf`` / ``math.fpowi`` and
``atan2`` to ``math.atan2``; IREE expands them to ``exp(y * log(x))`` and a
polynomial, which answer NaN for a negative base (``(-2.0) ** 2.0``), for
``0 ** 0`` and ``atan2(0, 0)``, and -inf for ``0.0 ** -1``. Here each op keeps
the compiled kernel for the ordinary case (a positive base, a nonzero
argument) and selects the C99 value for the special ones, so results match
eager PyTorch bit for bit in sign and class (0, inf, NaN). Also here: ops
whose lowering uses a wrong constant (gelu's tanh approximation), and
``minimum``/``maximum``/``clamp``/``hardtanh``, whose lowerings drop a NaN
first operand.

Also here: comparisons with an int number, ops on bool operands lowered as
signed i1 (import time), and ``angle``/``hypot``/``conj_physical`` of real
tensors, which the dialect lacks (capture time).
"""
from __future__ import annotations

import math

import torch

from ..dialects.torch_ops import torch_mlir_decompositions
from .registry import CAPTURE, IMPORT, ReentryGuard, register_decomposition

aten = torch.ops.aten

_inside = ReentryGuard()  # set while a decomposition traces its own kernel call


def _kernel(op, *args, **kwargs):
    """``op(*args)`` traced as is (not decomposed again by this module)."""
    with _inside:
        return op(*args, **kwargs)


def _sign_bit(x):
    """``signbit`` for non-NaN ``x`` (``aten.signbit`` decomposes to a
    bitcast IREE cannot compile): negative, or a zero whose reciprocal is."""
    return aten.logical_or.default(
        aten.lt.Scalar(x, 0.0),
        aten.logical_and.default(aten.eq.Scalar(x, 0.0), aten.lt.Scalar(aten.reciprocal.default(x), 0.0)))


def _pow_special(x, y, mag):
    """C99 ``pow(x, y)`` from ``mag``, the kernel's ``|x| ** y`` (right for a
    finite positive ``|x|`` and finite ``y``)."""
    ax = aten.abs.default(x)
    y_int = aten.eq.Tensor(aten.floor.default(y), y)  # false for inf and NaN
    half = aten.mul.Tensor(y, 0.5)
    y_odd = aten.logical_and.default(y_int, aten.ne.Tensor(aten.floor.default(half), half))
    inf = aten.full_like.default(mag, math.inf)
    zero = aten.full_like.default(mag, 0.0)
    one = aten.full_like.default(mag, 1.0)
    nan = aten.full_like.default(mag, math.nan)
    y_pos = aten.gt.Scalar(y, 0.0)
    # |x| ** y where the kernel is not trusted: |x| in {0, 1, inf}, y = +-inf
    mag = aten.where.self(aten.eq.Scalar(ax, 0.0), aten.where.self(y_pos, zero, inf), mag)
    mag = aten.where.self(aten.isinf.default(ax), aten.where.self(y_pos, inf, zero), mag)
    y_inf = aten.isinf.default(y)
    big = aten.logical_xor.default(aten.gt.Scalar(ax, 1.0), aten.logical_not.default(y_pos))
    mag = aten.where.self(y_inf, aten.where.self(big, inf, zero), mag)
    mag = aten.where.self(aten.eq.Scalar(ax, 1.0), one, mag)
    # the sign: odd integer powers of a negative base are negative; a finite
    # negative base to a finite non-integer power has no real value
    neg = _sign_bit(x)
    out = aten.where.self(aten.logical_and.default(neg, y_odd), aten.neg.default(mag), mag)
    no_real = aten.logical_and.default(
        aten.logical_and.default(aten.lt.Scalar(x, 0.0), aten.isfinite.default(x)),
        aten.logical_and.default(aten.isfinite.default(y), aten.logical_not.default(y_int)))
    out = aten.where.self(no_real, nan, out)
    out = aten.where.self(aten.logical_or.default(aten.isnan.default(x), aten.isnan.default(y)),
                          nan, out)
    # x ** 0 == 1 and 1 ** y == 1, even for NaN
    return aten.where.self(aten.logical_or.default(aten.eq.Scalar(y, 0.0), aten.eq.Scalar(x, 1.0)),
                           one, out)


@register_decomposition(aten.pow.Tensor_Tensor, scope=IMPORT)
def pow_tensor_tensor(x, y):
    dtype = torch.result_type(x, y)
    if not _inside.active and _is_int(dtype):
        return _int_tensor_power(*(t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype)
                                   for t in (x, y)))
    if _inside.active or not dtype.is_floating_point:
        return NotImplemented
    x, y = (t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype) for t in (x, y))
    mag = _kernel(aten.pow.Tensor_Tensor, aten.abs.default(x), y)
    return _pow_special(x, y, mag)


@register_decomposition(aten.pow.Tensor_Scalar, scope=IMPORT)
def pow_tensor_scalar(x, e):
    """Integer powers keep ``fpowi`` (exact repeated multiplication) but a
    negative one is ``1 / x ** -e`` (``fpowi`` gives ``0 ** -1 == -inf``);
    +-0.5 are sqrt and rsqrt as in eager; other powers take the tensor path.
    (Comparisons use float scalars: torch-mlir folds ``gt.Scalar`` of a
    float splat constant and an int scalar to false.)"""
    if not _inside.active and _is_int(x.dtype) and type(e) in (int, bool) and 0 <= e < 2 ** 63:
        return _int_power(x, int(e))  # (a bool power too: ``pow(i, True)``, seed 960466)
    if not _inside.active and x.dtype == torch.bool and type(e) is int and 0 <= e < 2 ** 63:
        # (int64, eager's type of a bool tensor to an int power: square(b); seed 400159.
        # To a bool power eager's type is bool, its meta kernel's int64: left to fail,
        # the graph runs eagerly, as the lazy device's ``EagerDtype`` does)
        return _int_power(aten._to_copy.default(x, dtype=torch.int64), e)
    if _inside.active or not x.dtype.is_floating_point \
            or isinstance(e, (bool, complex)) or not isinstance(e, (int, float)):
        return NotImplemented
    if e in (0.5, -0.5):  # as eager: sqrt(-0) == -0, rsqrt(-0) == -inf
        return (aten.sqrt.default if e > 0 else aten.rsqrt.default)(x)
    if float(e).is_integer() and abs(e) < 2 ** 31:
        if e >= 0:
            return NotImplemented
        return aten.reciprocal.default(aten.pow.Tensor_Scalar(x, -e))
    return pow_tensor_tensor(x, aten.full_like.default(x, e))


def _is_int(dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool


def _int_power(x, e: int):
    """An integer tensor to a non-negative int power by repeated squaring
    (torch-mlir lowers only float powers): eager's values, wrapping as
    eager's multiplications wrap."""
    if e == 0:
        return aten.ones_like.default(x)
    out, sq = None, x
    while e:
        if e & 1:
            out = sq if out is None else aten.mul.Tensor(out, sq)
        e >>= 1
        if e:
            sq = aten.mul.Tensor(sq, sq)
    return out


def _int_tensor_power(x, y):
    """Integer ``x ** y`` elementwise, as eager's ``powi``: repeated squaring
    over every bit of the exponent's type (unrolled: the exponents are data),
    wrapping as eager's multiplications wrap; a negative exponent gives 1 for
    a base of 1, +-1 for -1 (by its parity) and 0 otherwise."""
    bits = torch.iinfo(y.dtype).bits - (1 if y.dtype.is_signed else 0)
    out, sq, e = aten.ones_like.default(x), x, aten.abs.default(y)
    one_ = aten.ones_like.default(y)
    for k in range(bits):
        odd = aten.ne.Scalar(aten.bitwise_and.Scalar(e, 1), 0)
        out = aten.where.self(odd, aten.mul.Tensor(out, sq), out)
        if k + 1 < bits:
            sq, e = aten.mul.Tensor(sq, sq), aten.bitwise_right_shift.Tensor(e, one_)
    if not y.dtype.is_signed:
        return out
    one, minus = aten.eq.Scalar(x, 1), aten.eq.Scalar(x, -1)
    odd = aten.ne.Scalar(aten.bitwise_and.Scalar(y, 1), 0)
    negative = aten.where.self(minus, aten.where.self(odd, aten.neg.default(aten.ones_like.default(x)),
                                                      aten.ones_like.default(x)),
                               aten.where.self(one, aten.ones_like.default(x), aten.zeros_like.default(x)))
    return aten.where.self(aten.lt.Scalar(y, 0), negative, out)


@register_decomposition(aten.pow.Scalar, scope=IMPORT)
def pow_scalar(s, y):
    if not _inside.active and _is_int(y.dtype) and type(s) is int:
        return _int_tensor_power(aten.full_like.default(y, s), y)
    if _inside.active or not y.dtype.is_floating_point \
            or isinstance(s, (bool, complex)) or not isinstance(s, (int, float)):
        return NotImplemented
    x = aten.full_like.default(y, s)
    if math.isfinite(s) and s > 0 and s != 1:
        return _pow_positive_base(x, s > 1, y)
    return pow_tensor_tensor(x, y)


def _pow_positive_base(x, above_one: bool, y):
    """``_pow_special`` for a base ``x`` known finite, positive and not 1
    (AdamW's ``beta ** step``: two per parameter): the kernel is right but
    for infinite, NaN and zero powers. ~10 ops where ``_pow_special`` makes
    ~45, which took over half of GPT-2's fx stage (cProfile)."""
    mag = _kernel(aten.pow.Tensor_Tensor, x, y)
    inf = aten.full_like.default(mag, math.inf)
    zero = aten.full_like.default(mag, 0.0)
    grows = aten.gt.Scalar(y, 0.0) if above_one else aten.lt.Scalar(y, 0.0)
    out = aten.where.self(aten.isinf.default(y), aten.where.self(grows, inf, zero), mag)
    out = aten.where.self(aten.isnan.default(y), aten.full_like.default(mag, math.nan), out)
    return aten.where.self(aten.eq.Scalar(y, 0.0), aten.full_like.default(mag, 1.0), out)


@register_decomposition(aten.atan2.default, scope=IMPORT)
def atan2(y, x):
    """atan2 is odd in ``y`` (C99), so the kernel runs on ``|y|`` and the sign
    of ``y`` (also of a -0) is applied after: the kernel alone answers NaN for
    ``atan2(+-0, +-0)`` and ``atan2(+-inf, +-inf)`` and +pi for
    ``atan2(-0, -1)``."""
    dtype = torch.result_type(y, x)
    if not dtype.is_floating_point and not dtype.is_complex:  # atan2 promotes ints to float
        dtype = torch.get_default_dtype()
    if _inside.active or not dtype.is_floating_point:
        return NotImplemented
    # bool/int operands converted here, not in the kernel (which maps True to -1)
    y, x = (t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype) for t in (y, x))
    out = _kernel(aten.atan2.default, aten.abs.default(y), x)
    zero = aten.full_like.default(out, 0.0)
    pi = aten.full_like.default(out, math.pi)
    both_zero = aten.logical_and.default(aten.eq.Scalar(y, 0.0), aten.eq.Scalar(x, 0.0))
    out = aten.where.self(both_zero, aten.where.self(_sign_bit(x), pi, zero), out)
    both_inf = aten.logical_and.default(aten.isinf.default(y), aten.isinf.default(x))
    quarter = aten.full_like.default(out, math.pi / 4)
    three_quarters = aten.full_like.default(out, 3 * math.pi / 4)
    out = aten.where.self(both_inf, aten.where.self(aten.gt.Scalar(x, 0.0), quarter,
                                                    three_quarters), out)
    return aten.where.self(_sign_bit(y), aten.neg.default(out), out)


@register_decomposition(aten.gelu.default, scope=IMPORT)
def gelu(x, approximate="none"):
    """The tanh approximation through PyTorch's own decomposition
    (``torch._refs``): torch-mlir's lowering uses 0.797724 for sqrt(2/pi)
    (0.7978846), 5e-5 off eager at x = 1.3."""
    if approximate != "tanh":
        return NotImplemented
    from torch._decomp import decomposition_table
    return decomposition_table[aten.gelu.default](x, approximate=approximate)


def _nan_of_first(op):
    """``op`` answering NaN where its first operand is NaN, as eager does:
    torch-mlir lowers ``minimum``/``maximum``/``clamp`` as compare-and-select
    (``a < b ? a : b``), which picks the other operand for a NaN ``a``."""
    def decomposition(x, *args, **kwargs):
        if _inside.active or not x.dtype.is_floating_point:
            return NotImplemented
        out = _kernel(op, x, *args, **kwargs)
        if not out.dtype.is_floating_point:
            return out
        return aten.where.self(aten.ne.Tensor(x, x), x, out)
    decomposition.__name__ = f"{op.__name__}_nan"
    return decomposition


# (clamp_min/clamp_max.Tensor are the bool entries below.)
for _op in (aten.minimum.default, aten.maximum.default, aten.clamp.default, aten.clamp.Tensor,
            aten.clamp_min.default, aten.clamp_max.default, aten.hardtanh.default):
    register_decomposition(_op, scope=IMPORT)(_nan_of_first(_op))


# -- comparisons of a float tensor with an int number ----------------------
# torch-mlir folds ``gt.Scalar(splat 0.3, 0)`` (an int ``0``) to all-false:
# ``torch.full_like(x, 0.3) > 0`` answered False. With the number as a float
# the fold is right, and the comparison means the same (eager promotes it).

def _float_number(op):
    def decomposition(x, other):
        if not x.dtype.is_floating_point or type(other) is not int:
            return NotImplemented
        return op(x, float(other))
    return decomposition


for _op in (aten.gt.Scalar, aten.lt.Scalar, aten.ge.Scalar, aten.le.Scalar, aten.eq.Scalar,
            aten.ne.Scalar):
    register_decomposition(_op, scope=IMPORT)(_float_number(_op))


# -- bool operands of ops lowered as signed i1 --------------------------------
# Bool operands of ops whose lowering treats i1 as signed (True == -1).
#
# torch-mlir lowers a bool operand of these ops with signed integer semantics:
# ``clamp_min(True, False)`` is False, ``scatter_add``
# of True + True is False (it wraps). (Its bool -> complex conversion, ``sitofp``,
# gives -1 too; complex results are not captured at all.) Plain bool -> int/float
# conversion is lowered right (``extui`` / ``uitofp``), so the scatters convert
# their bool data operands to int32 and their result back with ``!= 0`` (eager's
# logical or for a sum); masks and indices stay as they are. ``clamp_min`` /
# ``clamp_max`` of bools are ``or`` / ``and``. (Also here, as
# it shares the ``scatter_reduce`` entry: an integer ``mean`` rounds down.)

_bool_inside = ReentryGuard()


def _widen(t):
    return aten._to_copy.default(t, dtype=torch.int32)


def _narrow(t):
    return aten.ne.Scalar(t, 0)


def _as_int32(op, positions: tuple[int, ...]):
    """A decomposition of ``op`` for bool data operands at ``positions``;
    results that were bool come back bool."""

    def decomposition(*args, **kwargs):
        if _bool_inside.active or not any(
                isinstance(args[i], torch.Tensor) and args[i].dtype == torch.bool
                for i in positions if i < len(args)):
            return NotImplemented
        args = list(args)
        for i in positions:
            if i < len(args) and isinstance(args[i], torch.Tensor) \
                    and args[i].dtype == torch.bool:
                args[i] = _widen(args[i])
        with _bool_inside:
            out = op(*args, **kwargs)
        if isinstance(out, (tuple, list)):
            return type(out)(_narrow(o) if o.dtype == torch.int32 else o for o in out)
        return _narrow(out)

    return decomposition


def _bool_only(op, logical):
    """``clamp_min`` / ``clamp_max`` of two bool tensors as or / and; other
    dtypes take torch-mlir's decomposition of ``op``."""
    def decomposition(x, bound):
        if x.dtype != torch.bool or bound.dtype != torch.bool:
            theirs = torch_mlir_decompositions().get(op)
            return theirs(x, bound) if theirs else NotImplemented
        return logical(x, bound)
    return decomposition


_scatter_reduce_bool = _as_int32(aten.scatter_reduce.two, (0, 3))


@register_decomposition(aten.scatter_reduce.two, scope=IMPORT)
def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    """Bool operands as above; an integer ``mean`` rounds down like eager
    (the lowering truncates toward zero): a floor division of the sum by the
    count, computed here from the sum and a scatter of ones."""
    if x.dtype == torch.bool or src.dtype == torch.bool:
        return _scatter_reduce_bool(x, dim, index, src, reduce, include_self=include_self)
    if reduce != "mean" or x.dtype.is_floating_point or x.dtype.is_complex \
            or _bool_inside.active:
        return NotImplemented
    total = aten.scatter_reduce.two(x, dim, index, src, "sum", include_self=include_self)
    base = aten.full_like.default(x, 1 if include_self else 0)
    count = aten.scatter_add.default(base, dim, index, aten.full_like.default(src, 1))
    count = aten.clamp_min.default(count, 1)
    return aten.div.Tensor_mode(total, count, rounding_mode="floor")


register_decomposition(aten.clamp_min.Tensor, scope=IMPORT)(  # max of bools
    _bool_only(aten.clamp_min.Tensor, aten.logical_or.default))
register_decomposition(aten.clamp_max.Tensor, scope=IMPORT)(  # min of bools
    _bool_only(aten.clamp_max.Tensor, aten.logical_and.default))
register_decomposition(aten.scatter_add.default, scope=IMPORT)(
    _as_int32(aten.scatter_add.default, (0, 3)))
register_decomposition(aten.index_put.default, scope=IMPORT)(
    _as_int32(aten.index_put.default, (0, 2)))


# -- capture time: ops the dialect lacks ---------------------------------------

@register_decomposition(aten.angle.default, scope=CAPTURE)
def angle(x):
    """The argument of a real number: pi for negatives, 0 otherwise, NaN
    kept (ATen's ``angle_impl``); integers give the default float dtype."""
    if x.is_complex():
        return NotImplemented
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    xf = aten._to_copy.default(x, dtype=dtype)
    pi = torch.full((), math.pi, dtype=dtype, device=x.device)
    zero = torch.zeros((), dtype=dtype, device=x.device)
    out = aten.where.self(aten.lt.Scalar(xf, 0), pi, zero)
    return aten.where.self(aten.isnan.default(xf), xf, out)


@register_decomposition(aten.hypot.default, scope=CAPTURE)
def hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow: the larger magnitude
    times sqrt(1 + r^2), r the ratio (<= 1); an infinite side gives inf even
    with a NaN on the other, as C's hypot."""
    if not (a.is_floating_point() and b.is_floating_point()):
        return NotImplemented
    ax, ay = aten.abs.default(a), aten.abs.default(b)
    hi, lo = aten.maximum.default(ax, ay), aten.minimum.default(ax, ay)
    one = torch.ones((), dtype=hi.dtype, device=hi.device)
    r = aten.div.Tensor(lo, aten.where.self(aten.eq.Scalar(hi, 0), one, hi))
    out = aten.mul.Tensor(hi, aten.sqrt.default(aten.add.Tensor(aten.mul.Tensor(r, r), one)))
    # NaN explicitly: compiled maximum/minimum may drop a NaN operand.
    either_nan = aten.logical_or.default(aten.isnan.default(ax), aten.isnan.default(ay))
    out = aten.where.self(either_nan, aten.add.Tensor(ax, ay), out)
    inf = torch.full((), math.inf, dtype=hi.dtype, device=hi.device)
    either_inf = aten.logical_or.default(aten.isinf.default(ax), aten.isinf.default(ay))
    return aten.where.self(either_inf, inf, out)


@register_decomposition([aten._conj_physical.default, aten.conj_physical.default], scope=CAPTURE)
def conj_physical(x):
    """The conjugate of a real tensor is a copy of it."""
    if x.is_complex():
        return NotImplemented
    return aten.clone.default(x)


# Random ops, written as the host-drawn fills eager itself makes (``normal_``,
# ``random_`` on an empty tensor, then arithmetic): the same generator
# stream as eager CPU, so ``torch.manual_seed`` gives the same numbers.
