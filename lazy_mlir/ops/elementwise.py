"""Decompositions that give IEEE/C99 answers where the compiled op does not.

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
"""
from __future__ import annotations

import math
import threading

import torch

aten = torch.ops.aten

_inside = threading.local()  # set while a decomposition traces its own kernel call


def _kernel(op, *args, **kwargs):
    """``op(*args)`` traced as is (not decomposed again by this module)."""
    _inside.on = True
    try:
        return op(*args, **kwargs)
    finally:
        _inside.on = False


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


def pow_tensor_tensor(x, y):
    dtype = torch.result_type(x, y)
    if getattr(_inside, "on", False) or not dtype.is_floating_point:
        return NotImplemented
    x, y = (t if t.dtype == dtype else aten._to_copy.default(t, dtype=dtype) for t in (x, y))
    mag = _kernel(aten.pow.Tensor_Tensor, aten.abs.default(x), y)
    return _pow_special(x, y, mag)


def pow_tensor_scalar(x, e):
    """Integer powers keep ``fpowi`` (exact repeated multiplication) but a
    negative one is ``1 / x ** -e`` (``fpowi`` gives ``0 ** -1 == -inf``);
    +-0.5 are sqrt and rsqrt as in eager; other powers take the tensor path.
    (Comparisons use float scalars: torch-mlir folds ``gt.Scalar`` of a
    float splat constant and an int scalar to false.)"""
    if getattr(_inside, "on", False) or not x.dtype.is_floating_point \
            or isinstance(e, (bool, complex)) or not isinstance(e, (int, float)):
        return NotImplemented
    if e in (0.5, -0.5):  # as eager: sqrt(-0) == -0, rsqrt(-0) == -inf
        return (aten.sqrt.default if e > 0 else aten.rsqrt.default)(x)
    if float(e).is_integer() and abs(e) < 2 ** 31:
        if e >= 0:
            return NotImplemented
        return aten.reciprocal.default(aten.pow.Tensor_Scalar(x, -e))
    return pow_tensor_tensor(x, aten.full_like.default(x, e))


def pow_scalar(s, y):
    if getattr(_inside, "on", False) or not y.dtype.is_floating_point \
            or isinstance(s, (bool, complex)) or not isinstance(s, (int, float)):
        return NotImplemented
    x = aten.full_like.default(y, s)
    return pow_tensor_tensor(x, y)


def atan2(y, x):
    """atan2 is odd in ``y`` (C99), so the kernel runs on ``|y|`` and the sign
    of ``y`` (also of a -0) is applied after: the kernel alone answers NaN for
    ``atan2(+-0, +-0)`` and ``atan2(+-inf, +-inf)`` and +pi for
    ``atan2(-0, -1)``."""
    dtype = torch.result_type(y, x)
    if not dtype.is_floating_point and not dtype.is_complex:  # atan2 promotes ints to float
        dtype = torch.get_default_dtype()
    if getattr(_inside, "on", False) or not dtype.is_floating_point:
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
        if getattr(_inside, "on", False) or not x.dtype.is_floating_point:
            return NotImplemented
        out = _kernel(op, x, *args, **kwargs)
        if not out.dtype.is_floating_point:
            return out
        return aten.where.self(aten.ne.Tensor(x, x), x, out)
    decomposition.__name__ = f"{op.__name__}_nan"
    return decomposition


# (clamp_min/clamp_max.Tensor belong to bool_decompositions, which wins.)
_NAN_OF_FIRST = [aten.minimum.default, aten.maximum.default, aten.clamp.default,
                 aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_max.default,
                 aten.hardtanh.default]

IEEE_DECOMPOSITIONS = {
    **{op: _nan_of_first(op) for op in _NAN_OF_FIRST},
    aten.pow.Tensor_Tensor: pow_tensor_tensor,
    aten.pow.Tensor_Scalar: pow_tensor_scalar,
    aten.pow.Scalar: pow_scalar,
    aten.atan2.default: atan2,
    aten.gelu.default: gelu,
}
