"""The gamma family (``lgamma``, ``digamma``, ``polygamma``,
``special_zeta``) in aten elementwise ops; see ``special.py``
for the guarantees they share (float32 arithmetic, eager's answers at the
special values, fixed loop counts that are exact rewrites of ATen's loops).
"""
from __future__ import annotations

import math

import torch

from .special import (TRIG_CONSTANTS, _Consts, _cos_small, _sin, _sin_small, _add, _and, _div,
                      _eq, _exp, _float_op, _full, _is_neg_zero_or_neg, _log, _lt, _mul, _or,
                      _polevl, _sub, _where)
from .registry import CAPTURE, IMPORT, register_decomposition

aten = torch.ops.aten

# lgamma(2 + z) = (1 - euler_gamma) z + sum_k>=2 (-1)^k (zeta(k) - 1) / k z^k:
# for |z| <= 1/2 the terms fall as 4^-k, so 16 reach float32 rounding. Highest
# power first (polevl order), computed with mpmath to 17 digits.
_LGAMMA2_SERIES = (
    9.55141213040742e-07, -2.039215753801366e-06, 4.374866789907488e-06, -9.439488275268397e-06,
    2.050721277567069e-05, -4.492623673813314e-05, 9.945751278180853e-05, -0.00022315475845357939,
    0.0005096695247430425, -0.001192753911703261, 0.0028905103307415234, -0.007385551028673986,
    0.020580808427784546, -0.0673523010531981, 0.3224670334241132, 0.42278433509846713,
)
_LOG_PI = 1.1447298858494002
_HALF_LOG_2PI = 0.9189385332046728


def _lgamma_positive(x, k):
    """lgamma of x > 0 (and +inf). Below 7.5: x = n + z with n = round(x),
    |z| <= 1/2, as lgamma(2 + z) from the series, shifted by the recurrence
    Gamma(x + 1) = x Gamma(x) (a product of at most 5 factors, or log1p(z)
    and log(x) below 1.5): no cancellation near the zeros at 1 and 2.
    From 7.5 on, Stirling's series to x^-7 (error below 1e-11)."""
    n = aten.clamp.default(aten.floor.default(_add(x, k[0.5])), 0, 7)
    z = _sub(x, n)
    series = _mul(z, _polevl(z, k.coeffs("S")))
    prod = aten.ones_like.default(x)
    for j in range(2, 7):  # Gamma(n + z) = (n-1+z) ... (2+z) Gamma(2+z)
        prod = _where(_lt(k[float(j)], n), _mul(prod, _add(z, k[float(j)])), prod)
    small = _add(series, _log(prod))
    small = _where(aten.le.Scalar(n, 1), _sub(small, aten.log1p.default(z)), small)
    small = _where(aten.eq.Scalar(n, 0), _sub(small, _log(x)), small)
    w = aten.reciprocal.default(x)
    w2 = _mul(w, w)
    correction = _mul(w, _sub(k[1 / 12], _mul(w2, _sub(k[1 / 360], _mul(
        w2, _sub(k[1 / 1260], _mul(w2, k[1 / 1680])))))))
    lx = _log(x)
    # x log x - x: glibc's lgammaf overflows to inf where x log x does
    # (x > 4.0371e36), a little before lgamma itself exceeds FLT_MAX
    x_lx = _mul(x, lx)
    big = _add(_sub(_sub(x_lx, x), _mul(lx, k[0.5])), _add(correction, k[_HALF_LOG_2PI]))
    # explicitly: the compiled x log x - x is one fused multiply-add
    big = _where(aten.isinf.default(x_lx), x_lx, big)
    out = _where(_lt(x, k[7.5]), small, big)
    return _where(aten.isinf.default(x), x, out)


def _lgamma(x):
    """C's lgammaf: +inf at the poles (0, -0, negative integers) and at
    +-inf, NaN kept; x < 0 by reflection, log(pi / |sin(pi x)|) -
    lgamma(1 - x), with sin(pi x) taken of x minus its nearest integer
    (exact) so it stays accurate next to the poles."""
    k = _Consts(x, 0.5, 7.5, 2.0, 3.0, 4.0, 5.0, 6.0, 1 / 12, 1 / 360, 1 / 1260, 1 / 1680,
                _HALF_LOG_2PI, _LOG_PI, math.inf, *TRIG_CONSTANTS, S=_LGAMMA2_SERIES)
    neg = aten.lt.Scalar(x, 0)
    positive = _lgamma_positive(_where(neg, aten.rsub.Scalar(x, 1), x), k)
    r = _sub(x, aten.round.default(x))
    sin_pi = aten.abs.default(_sin_small(_mul(r, k[math.pi]), k))
    reflected = _sub(_sub(k[_LOG_PI], _log(sin_pi)), positive)
    out = _where(neg, reflected, positive)
    pole = _and(aten.le.Scalar(x, 0), _eq(aten.floor.default(x), x))  # -inf included
    out = _where(pole, k[math.inf], out)
    return _where(aten.isnan.default(x), x, out)


_PSI_10 = 2.25175258906672110764
_DIGAMMA_A = (8.33333333333333333333E-2, -2.10927960927960927961E-2, 7.57575757575757575758E-3,
              -4.16666666666666666667E-3, 3.96825396825396825397E-3, -8.33333333333333333333E-3,
              8.33333333333333333333E-2)


def _digamma_positive(x, k):
    """ATen's float ``calc_digamma`` for x > 0: "while (x < 10) result -= 1/x,
    x += 1" runs at most 10 times for x > 0, so it is unrolled 10 times, each
    step applied only while x < 10; then PSI_10 at exactly 10, else the
    asymptotic series."""
    result = aten.zeros_like.default(x)
    for _ in range(10):
        below = _lt(x, k[10.0])
        result = _where(below, _sub(result, aten.reciprocal.default(x)), result)
        x = _where(below, _add(x, 1), x)
    z = aten.reciprocal.default(_mul(x, x))
    y = _mul(z, _polevl(z, k.coeffs("A")))
    y = _where(_lt(x, k[1e17]), y, aten.zeros_like.default(x))
    asymptotic = _sub(_sub(_add(result, _log(x)), _div(k[0.5], x)), y)
    return _where(_eq(x, k[10.0]), _add(result, k[_PSI_10]), asymptotic)


def _digamma(x):
    """ATen's float ``calc_digamma``: -inf at +0 and +inf at -0, NaN at
    negative integers and -inf; x < 0 by reflection, digamma(1 - x) -
    pi / tan(pi r) with r the fractional part of x (tan as cos / sin: the
    compiled tan is inaccurate near its poles, the compiled sin next to 0)."""
    k = _Consts(x, 10.0, 1e17, 0.5, _PSI_10, math.inf, math.nan, *TRIG_CONSTANTS, A=_DIGAMMA_A)
    neg = aten.lt.Scalar(x, 0)
    positive = _digamma_positive(_where(neg, aten.rsub.Scalar(x, 1), x), k)
    # tan has period pi: x minus its nearest integer (exact) instead of
    # ATen's fractional part keeps pi * r accurate next to the poles
    pr = _mul(_sub(x, aten.round.default(x)), k[math.pi])
    reflected = _sub(positive, _div(_mul(_cos_small(pr, k), k[math.pi]), _sin_small(pr, k)))
    out = _where(neg, reflected, positive)
    out = _where(_and(neg, _eq(aten.trunc.default(x), x)), k[math.nan], out)
    zero = _where(_is_neg_zero_or_neg(x), k[math.inf], aten.neg.default(k[math.inf]))
    return _where(aten.eq.Scalar(x, 0), zero, out)


def _trigamma(x):
    """ATen's float ``trigamma``: reflection below 1/2 (sinf(pi * x) as
    ATen takes it, of the rounded product), 6 recurrence steps, then the
    asymptotic series. Limit: sin is reduced by a three-part pi, exact for
    |x| < 2^16; below -2^16 the result drifts from glibc's sinf (which
    reduces exactly at any size)."""
    k = _Consts(x, math.pi * math.pi, 1 / 6, 1 / 30, 1 / 42, 2.0, *TRIG_CONSTANTS)
    low = _lt(x, k[0.5])
    sin_pi = _sin(_mul(x, k[math.pi]), k)
    result = _where(low, aten.neg.default(_div(k[math.pi * math.pi], _mul(sin_pi, sin_pi))),
                    aten.zeros_like.default(x))
    x = _where(low, aten.rsub.Scalar(x, 1), x)
    for _ in range(6):
        result = _add(result, aten.reciprocal.default(_mul(x, x)))
        x = _add(x, 1)
    ixx = aten.reciprocal.default(_mul(x, x))
    series = _sub(k[1 / 6], _mul(ixx, _sub(k[1 / 30], _mul(ixx, k[1 / 42]))))
    tail = _add(_add(aten.reciprocal.default(_mul(x, k[2.0])), 1), _mul(ixx, series))
    result = _add(result, _div(tail, x))
    return _where(low, aten.neg.default(result), result)


_MACHEP = 1.11022302462515654042E-16
_ZETA_A = (12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
           -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
           1.8152105401943546773e17, -7.1661652561756670113e18)


def _zeta_positive(x, q, k):
    """ATen's ``zeta`` (Cephes) for q > 0: the direct sum runs exactly 9
    terms there (its loop runs while i < 9 or a <= 9, and a = q + i), then
    12 Euler-Maclaurin terms; each of ATen's early returns is a mask that
    freezes the sum from that term on. ATen's running product a and power b
    are kept as their product a * b, which is what each term uses: a alone
    overflows float32."""
    neg_x = aten.neg.default(x)

    def power(a):  # a ** -x for a >= 0: exp and log, without pow's sign cases
        out = _exp(_mul(neg_x, _log(a)))
        return _where(aten.eq.Scalar(a, 1), aten.ones_like.default(a), out)  # 1 ** -inf

    s = power(q)
    a = q
    done = aten.zeros_like.default(x, dtype=torch.bool)
    b = aten.zeros_like.default(x)
    for _ in range(9):
        a = _add(a, 1)
        b = power(a)
        s = _where(done, s, _add(s, b))
        eps = _mul(s, k[_MACHEP])
        done = _or(done, _and(_lt(aten.neg.default(eps), b), _lt(b, eps)))
    w = a
    tail = _sub(_add(s, _div(_mul(b, w), _sub(x, 1))), _mul(b, k[0.5]))
    s = _where(done, s, tail)
    ab = b
    kk = aten.zeros_like.default(x)
    coefficients = k.coeffs("A")
    for i in range(12):
        ab = _div(_mul(ab, _add(x, kk)), w)
        t = _div(ab, coefficients[i])
        s = _where(done, s, _add(s, t))
        done = _or(done, _lt(aten.abs.default(_div(t, s)), k[_MACHEP]))
        kk = _add(kk, 1)
        ab = _div(_mul(ab, _add(x, kk)), w)
        kk = _add(kk, 1)
    return s


def _zeta(x, q):
    """Hurwitz zeta(x, q) = sum_k (q + k)^-x as ATen: inf at x == 1, NaN for
    x < 1, inf at q a non-positive integer, NaN for q < 0 and x not an
    integer. For q < 0 (x an integer s) ATen sums from q until q + i > 9,
    a value-dependent count; here the same sum is split at 0 with f = q -
    floor(q) in (0, 1): zeta(s, q) = (-1)^s (zeta(s, 1 - f) - zeta(s, 1 - q))
    + zeta(s, f), all three at positive arguments (one batched evaluation).
    float32 sums where ATen sums in double: for odd s and f near 1/2 the
    first two nearly cancel, an absolute error of a few float32 ulps of
    zeta(s, f)."""
    x, q = aten.broadcast_tensors.default([x, q])
    k = _Consts(x, 0.5, _MACHEP, 2.0, math.inf, math.nan, A=_ZETA_A)
    f = _sub(q, aten.floor.default(q))
    # 1 - f as ceil(q) - q: exact (f is not for -1 < q < 0, and the largest
    # term (-q)^-s lies in zeta(s, 1 - f))
    g = _sub(aten.ceil.default(q), q)
    neg = aten.lt.Scalar(q, 0)
    points = aten.stack.default([_where(neg, f, q), g, aten.rsub.Scalar(q, 1)])
    xs = aten.expand.default(aten.unsqueeze.default(x, 0), list(points.shape))
    z = _zeta_positive(xs, points, k)
    z_q, z_1f, z_1q = (aten.select.int(z, 0, i) for i in range(3))
    odd = aten.ne.Tensor(aten.floor.default(_div(x, k[2.0])), _div(x, k[2.0]))
    head = _sub(z_1f, z_1q)
    head = _where(odd, aten.neg.default(head), head)
    out = _where(neg, _add(head, z_q), z_q)
    q_pole = _and(aten.le.Scalar(q, 0), _eq(aten.floor.default(q), q))
    out = _where(q_pole, k[math.inf], out)
    x_not_int = aten.ne.Tensor(aten.floor.default(x), x)  # True for NaN
    out = _where(_and(neg, x_not_int), k[math.nan], out)
    out = _where(aten.lt.Scalar(x, 1), k[math.nan], out)
    return _where(aten.eq.Scalar(x, 1), k[math.inf], out)


@register_decomposition(aten.polygamma.default, scope=CAPTURE)
def polygamma(n, x):
    """ATen: digamma for n = 0, trigamma for n = 1, else
    (-1)^(n+1) n! zeta(n + 1, x)."""
    if not isinstance(n, int) or n < 0:
        return NotImplemented

    def fn(x):
        if n == 0:
            return _digamma(x)
        if n == 1:
            return _trigamma(x)
        scale = float(math.factorial(n)) * (1.0 if n % 2 else -1.0)
        order = aten.full_like.default(x, float(n + 1))
        return aten.mul.Tensor(_zeta(order, x), _full(x, scale))
    return _float_op(fn)(x)


lgamma = _float_op(_lgamma)
digamma = _float_op(_digamma)
zeta = _float_op(_zeta)


@register_decomposition(aten.special_polygamma.default, scope=CAPTURE)
def special_polygamma(n, x):
    return polygamma(n, x)


# lgamma also before import: torch-mlir's decomposition of mvlgamma makes it.
register_decomposition(aten.lgamma.default, scope=CAPTURE)(lgamma)
register_decomposition(aten.lgamma.default, scope=IMPORT)(lgamma)
register_decomposition(aten.digamma.default, scope=CAPTURE)(digamma)
register_decomposition(aten.special_zeta.default, scope=CAPTURE)(zeta)
