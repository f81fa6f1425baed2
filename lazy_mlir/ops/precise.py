"""Decompositions of ops the compiler lowers, but not accurately enough
(denied in ``support.DENIED``), applied at capture (``lazy/decompose.py``) and
again before import (``pipeline/fx_graph.decompose``), where graphs that were
never captured (``torch.compile``'s, ``lm.export``'s) reach them.

``tan``: IREE expands it as sin/cos, up to 5e-4 relative off near the poles.
Here it is Cephes' ``tanf``: an exact three-part reduction by pi/4 and a
degree-13 odd polynomial, within 2 ulp of the true value for |x| < 8192
(the range where the reduction is exact; beyond it, a float32 argument
has fewer than 2 bits below the binary point and no library is exact either).

``logcumsumexp``: torch-mlir writes log(cumsum(exp(x))), which overflows for
x > 88. Here each prefix is shifted by its own maximum, as ATen's running
log-add-exp is: out[i] = m[i] + log(sum_{j<=i} exp(x[j] - m[i])), with the
prefix maxima and sums taken over a triangular mask (a static-shape
formulation: n^2 work along the scanned dim, refused above ``_SCAN_LIMIT``).
"""
from __future__ import annotations

import math

import torch

from .registry import CAPTURE, IMPORT, register_decomposition

aten = torch.ops.aten

# Cephes' tanf: pi/4 in three parts whose products with the octant count are
# exact in float32 for counts < 2**13.
_DP1, _DP2, _DP3 = 0.78515625, 2.4187564849853515625e-4, 3.77489497744594108e-8
_TAN_POLY = (9.38540185543e-3, 3.11992232697e-3, 2.44301354525e-2, 5.34112807005e-2,
             1.33387994085e-1, 3.33331568548e-1)


def _scalar(value, like):
    return torch.full((), value, dtype=like.dtype, device=like.device)


def _reduced(ax):
    """Cephes' reduction of ``ax`` (>= 0) by pi/4: ``(j, z)``, the octant
    rounded up to even (j = 2*ceil(floor(ax * 4/pi) / 2)) and
    ``ax - j*pi/4`` in [-pi/4, pi/4], pi/4 subtracted in three parts."""
    j = aten.floor.default(aten.mul.Scalar(ax, 4 / math.pi))
    j = aten.add.Tensor(j, aten.remainder.Scalar(j, 2))
    z = aten.sub.Tensor(ax, aten.mul.Scalar(j, _DP1))
    z = aten.sub.Tensor(z, aten.mul.Scalar(j, _DP2))
    return j, aten.sub.Tensor(z, aten.mul.Scalar(j, _DP3))


def _poly(z, coefficients):
    """Horner's rule: coefficients from the highest power."""
    p = aten.full_like.default(z, coefficients[0])
    for c in coefficients[1:]:
        p = aten.add.Scalar(aten.mul.Tensor(p, z), c)
    return p


def tan(x):
    """Cephes ``tanf`` in float32; other floating dtypes are not covered
    (float64 needs the double-precision polynomial and reduction)."""
    if x.dtype == torch.float64 or x.is_complex() or x.dtype in (torch.float16, torch.bfloat16):
        return NotImplemented
    if not x.is_floating_point():  # integers and bool give the default dtype, as eager
        if torch.get_default_dtype() != torch.float32:
            return NotImplemented
        x = aten._to_copy.default(x, dtype=torch.float32)
    ax = aten.abs.default(x)
    j, z = _reduced(ax)
    zz = aten.mul.Tensor(z, z)
    y = aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(_poly(zz, _TAN_POLY), zz), z), z)
    # Octants 2 and 6 (j = 2 mod 4): the cotangent, -1/y.
    odd = aten.eq.Scalar(aten.remainder.Scalar(j, 4), 2)
    y = aten.where.self(odd, aten.neg.default(aten.reciprocal.default(y)), y)
    y = aten.where.self(aten.lt.Scalar(x, 0), aten.neg.default(y), y)
    # Tiny arguments: tan(x) = x to float32 precision, -0 kept.
    y = aten.where.self(aten.gt.Scalar(ax, 1e-4), y, x)
    # inf and NaN give NaN (the reduction above would give NaN for inf too,
    # but only by way of inf - inf: explicit is safer across backends).
    nan = _scalar(math.nan, y)
    return aten.where.self(aten.isfinite.default(x), y, nan)


_SCAN_LIMIT = 2048  # elements along the scanned dim


def logcumsumexp(x, dim):
    """ATen's running log-add-exp, NaN propagating from where it appears,
    -inf for an all -inf prefix, +inf once a +inf is seen."""
    if not x.is_floating_point() or x.dtype == torch.float64 or x.is_complex():
        return NotImplemented
    if x.dim() == 0:
        return aten.clone.default(x)
    dim = dim % x.dim()
    n = x.shape[dim]
    if n > _SCAN_LIMIT or n * x.numel() > 2 ** 26:
        return NotImplemented
    if n == 0:
        return aten.clone.default(x)
    xl = aten.movedim.int(x, dim, -1)                       # [..., n]
    rows = aten.unsqueeze.default(xl, -2)                   # [..., 1, n]: x[j]
    arange = aten.arange.default(n, dtype=torch.int64, device=x.device)
    mask = aten.le.Tensor(aten.unsqueeze.default(arange, 0), aten.unsqueeze.default(arange, 1))
    neg_inf = _scalar(-math.inf, x)
    prefix = aten.where.self(mask, rows, neg_inf)            # [..., i, j]: x[j] for j <= i
    m = aten.amax.default(prefix, [-1], True)               # [..., n, 1]
    finite_m = aten.where.self(aten.isfinite.default(m), m, aten.zeros_like.default(m))
    terms = aten.where.self(mask, aten.exp.default(aten.sub.Tensor(prefix, finite_m)),
                            aten.zeros_like.default(prefix))
    out = aten.add.Tensor(aten.squeeze.dim(finite_m, -1),
                          aten.log.default(aten.sum.dim_IntList(terms, [-1])))
    m = aten.squeeze.dim(m, -1)
    # Infinite maxima: -inf (nothing yet) or +inf (everything after) as eager.
    out = aten.where.self(aten.isinf.default(m), m, out)
    # A NaN anywhere in the prefix makes the rest NaN (compiled max may skip it).
    seen_nan = aten.gt.Scalar(aten.cumsum.default(
        aten._to_copy.default(aten.isnan.default(xl), dtype=torch.int32), -1), 0)
    out = aten.where.self(seen_nan, _scalar(math.nan, out), out)
    return aten.movedim.int(out, -1, dim)


for _scope in (CAPTURE, IMPORT):
    register_decomposition(aten.tan.default, scope=_scope)(tan)
    register_decomposition(aten.logcumsumexp.default, scope=_scope)(logcumsumexp)


# Cephes' sinf/cosf: the same reduction by pi/4 as tanf, then one of two
# polynomials on [-pi/4, pi/4]. IREE's sin/cos reduce by 2*pi in one float32
# step: off by 2.8e-4 at |x| = 1e4 (rotary embeddings of long sequences),
# 0.03 at 1e6 and far outside [-1, 1] at 1e9 (fuzzer seed 900496: sin of
# float bits viewed as int32 gave 41178.6 for -0.44). Within 2 ulp for
# |x| < 1e7 (measured: 1.2e-7 absolute at 1e7), in [-1, 1] beyond. Before
# import only (every way in): a dtype not covered keeps the compiler's
# lowering instead of running eagerly.
_SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _sin_cos(x, cosine: bool):
    if x.is_complex() or x.dtype == torch.float64:
        return NotImplemented
    if not x.is_floating_point():  # (integers and bool: the default dtype, as eager)
        if torch.get_default_dtype() != torch.float32:
            return NotImplemented
        x = aten._to_copy.default(x, dtype=torch.float32)
    narrow = x.dtype if x.dtype != torch.float32 else None  # (half types: in float32)
    if narrow is not None:
        x = aten._to_copy.default(x, dtype=torch.float32)
    ax = aten.abs.default(x)
    j, z = _reduced(ax)
    z = aten.where.self(aten.lt.Scalar(ax, 2.0 ** 26), z, aten.zeros_like.default(z))  # (no inf - inf)
    zz = aten.mul.Tensor(z, z)
    sin_z = aten.add.Tensor(aten.mul.Tensor(aten.mul.Tensor(_poly(zz, _SIN_POLY), zz), z), z)
    cos_z = aten.add.Scalar(aten.sub.Tensor(
        aten.mul.Tensor(aten.mul.Tensor(_poly(zz, _COS_POLY), zz), zz), aten.mul.Scalar(zz, 0.5)), 1.0)
    quadrant = aten.remainder.Scalar(j, 8)                  # 0, 2, 4 or 6
    swapped = aten.eq.Scalar(aten.remainder.Scalar(quadrant, 4), 2)
    if cosine:  # cos(x) = cos(|x|): minus in quadrants 2 and 4 (pi/2 .. 3pi/2)
        y = aten.where.self(swapped, sin_z, cos_z)
        negative = aten.logical_or.default(aten.eq.Scalar(quadrant, 2), aten.eq.Scalar(quadrant, 4))
    else:       # sin(x) = sign(x) sin(|x|): minus in quadrants 4 and 6 (pi .. 2pi)
        y = aten.where.self(swapped, cos_z, sin_z)
        negative = aten.logical_xor.default(aten.ge.Scalar(quadrant, 4), aten.lt.Scalar(x, 0))
        y = aten.where.self(aten.gt.Scalar(ax, 1e-4), y, x)  # (tiny: x itself, -0 kept)
        negative = aten.logical_and.default(negative, aten.gt.Scalar(ax, 1e-4))
    y = aten.where.self(negative, aten.neg.default(y), y)
    # Past 2**24 the octant is not exact in float32 (the arguments are even
    # integers there; past 2**26 z is 0 above): a value in [-1, 1], not
    # eager's (README, differences).
    y = aten.clamp.default(y, -1.0, 1.0)
    y = aten.where.self(aten.isfinite.default(x), y, _scalar(math.nan, y))
    return aten._to_copy.default(y, dtype=narrow) if narrow is not None else y


def sin(x):
    return _sin_cos(x, cosine=False)


def cos(x):
    return _sin_cos(x, cosine=True)


register_decomposition(aten.sin.default, scope=IMPORT)(sin)
register_decomposition(aten.cos.default, scope=IMPORT)(cos)
