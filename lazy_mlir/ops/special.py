"""Special functions (``erfc``, ``special_erfcx``, ``special_ndtri`` here;
``lgamma``, ``digamma``, ``polygamma``, ``special_zeta`` in
``special_gamma.py``) in aten elementwise ops, following
ATen's CPU code (``ATen/native/Math.h``) branch for branch, so results match
eager within float32 rounding, with eager's answers at NaN, +-inf, +-0 and
the poles. Also ``frexp`` and ``nextafter``, bit-exact without a bitcast.

Guarantees and limits:

- float32 is computed in float32 and integer/bool inputs are promoted to the
  default dtype, as eager does; float16/bfloat16 go through float32 (ATen's
  CPU kernels do too); float64 and complex return ``NotImplemented`` (fall
  back): float32 arithmetic would not reach float64's accuracy.
- ATen's data-dependent loops are unrolled to fixed counts that are exact
  rewrites, not truncations: digamma's "push x to >= 10" runs at most 10
  steps and each step is masked once it is done; zeta's direct sum takes
  ATen's 9 terms for q > 0 and its early exits are masked in the same order.
  Where ATen loops a number of times that depends on the value (zeta at
  q < 0, which only happens for an integer order), an identity over
  positive arguments takes its place (see ``_zeta``).
- Constants are gathered in one table per decomposition: lazy capture lifts
  every Python number other than 0 and 1 to a graph input, and a dispatch
  binds at most 32 buffers.
"""
from __future__ import annotations

import math

import numpy
import torch

from .special_tables import ERFCX_Y100
from .registry import CAPTURE, IMPORT, register_decomposition

aten = torch.ops.aten

_add, _sub, _mul, _div = aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor
_where, _log, _exp = aten.where.self, aten.log.default, aten.exp.default
_lt, _gt, _ge, _eq = aten.lt.Tensor, aten.gt.Tensor, aten.ge.Tensor, aten.eq.Tensor
_and, _or = aten.logical_and.default, aten.logical_or.default


class _Consts:
    """The constants of one decomposition, numbers and coefficient lists, as
    0-d selects of one table (the compiled kernel reads one buffer for all):
    ``k = _Consts(x, 2.0, 0.5, P=(1.0, 3.0)); k[2.0]; k.coeffs("P")``."""

    def __init__(self, like, *values, **lists):
        self.index = {v: i for i, v in enumerate(dict.fromkeys(values))}
        flat = list(self.index)
        self.lists = {}
        for name, coefficients in lists.items():
            self.lists[name] = range(len(flat), len(flat) + len(coefficients))
            flat.extend(coefficients)
        self.table = _table(like, tuple(flat))

    def __getitem__(self, value):
        return aten.select.int(self.table, 0, self.index[value])

    def coeffs(self, name):
        return [aten.select.int(self.table, 0, i) for i in self.lists[name]]


def _table(like, values):
    """A coefficient list (or table) as one float32 constant tensor (see
    ``_Consts``), used through one ``clone``: a traced decomposition then
    has one constant input, however many selects read it."""
    assert like.dtype == torch.float32
    # A new tensor for every trace (one seen by an earlier trace comes back
    # fake), made from numpy: ``torch.tensor`` inside make_fx records a
    # ``detach_`` the compiler cannot take.
    return aten.clone.default(torch.from_numpy(numpy.array(values, dtype=numpy.float32)))


def _polevl(x, coefficients):
    """Cephes ``polevl``: sum of c[i] * x ** (n - i), by Horner."""
    out = aten.add.Tensor(aten.zeros_like.default(x), coefficients[0])
    for c in coefficients[1:]:
        out = _add(_mul(out, x), c)
    return out


def _float_op(fn):
    """``fn`` on float32 (ATen's float kernel), result in eager's dtype:
    integers and bool promote to the default dtype; float64 and complex are
    not handled."""
    def decomposition(*args):
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        dtype = torch.result_type(*args) if len(args) > 1 else args[0].dtype
        if dtype == torch.float64 or dtype.is_complex or \
                any(t.dtype == torch.float64 or t.dtype.is_complex for t in tensors):
            return NotImplemented
        result_dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
        if result_dtype == torch.float64:
            return NotImplemented
        shape = list(torch.broadcast_shapes(*(t.shape for t in tensors)))
        # 0-d inputs as 1-element vectors: iree-compile 3.13 did not finish
        # (minutes, many GB) on digamma's chain of 0-d ops
        args = [aten._to_copy.default(aten.reshape.default(a, [1]) if not shape else a,
                                      dtype=torch.float32) if isinstance(a, torch.Tensor)
                else a for a in args]
        out = aten._to_copy.default(fn(*args), dtype=result_dtype)
        return out if shape else aten.reshape.default(out, [])
    return decomposition


_PI_PARTS = (3.140625, 9.67502593994140625e-4, 1.509957990978376432e-7)  # Cody-Waite


def _sin_small(y, k):
    """sin(y) for |y| <= pi/2 by its Taylor series to y^15 (error < 1e-9):
    the compiled sin is off by ~6e-8 in absolute terms next to 0, where
    lgamma's and digamma's reflections divide by it."""
    y2 = _mul(y, y)
    out = k[1 / math.factorial(15)]
    for n in range(13, 0, -2):
        out = _sub(k[1 / math.factorial(n)], _mul(y2, out))
    return _mul(y, out)


def _cos_small(y, k):
    """cos(y) for |y| <= pi/2 by its Taylor series to y^16."""
    y2 = _mul(y, y)
    out = k[1 / math.factorial(16)]
    for n in range(14, -1, -2):
        out = _sub(k[1 / math.factorial(n)], _mul(y2, out))
    return out


def _sin(y, k):
    """sin(y) with y reduced by a three-part pi (exact for |y| < 2^16 pi,
    as glibc's sinf is), then ``_sin_small``."""
    n = aten.round.default(_div(y, k[math.pi]))
    r = y
    for part in _PI_PARTS:
        r = _sub(r, _mul(n, k[part]))
    odd = aten.ne.Tensor(aten.floor.default(_mul(n, k[0.5])), _mul(n, k[0.5]))
    out = _sin_small(r, k)
    return _where(odd, aten.neg.default(out), out)


# the constants the functions above read from a decomposition's table
TRIG_CONSTANTS = (math.pi, 0.5) + _PI_PARTS + tuple(1 / math.factorial(n) for n in range(17))


def _full(like, value):
    return aten.full_like.default(like, value)


def _is_neg_zero_or_neg(x):
    """x < 0, or x is -0.0 (its reciprocal is -inf); False for NaN."""
    return _or(aten.lt.Scalar(x, 0), _and(aten.eq.Scalar(x, 0),
                                         aten.lt.Scalar(aten.reciprocal.default(x), 0)))


# ---------------------------------------------------------------- erfcx, erfc

_ISPI = 0.56418958354775628694807945156  # 1 / sqrt(pi)


def _erfcx_y100(y100, k):
    """ATen's ``erfcx_y100``: the Chebyshev fit of interval floor(y100)."""
    table = _table(y100, ERFCX_Y100)
    # The interval index as an integer; NaN and y100 >= 100 (x == 0, where
    # ATen answers 1.0 below) are clamped so the gather stays in bounds.
    safe = _where(aten.isnan.default(y100), aten.zeros_like.default(y100), y100)
    idx = aten.clamp.default(aten.floor.default(safe), 0, 99)
    rows = aten.index.Tensor(table, [aten._to_copy.default(idx, dtype=torch.int64)])
    t = _sub(_mul(y100, k[2.0]), _add(_mul(idx, k[2.0]), k[1.0]))
    out = aten.select.int(rows, -1, 6)
    for j in range(5, -1, -1):
        out = _add(aten.select.int(rows, -1, j), _mul(out, t))
    return _where(_ge(y100, k[100.0]), aten.ones_like.default(y100), out)


def _erfcx(x):
    """ATen's ``calc_erfcx`` (Faddeeva package): x >= 0 from the table of
    y100 = 400 / (4 + x) or a continued fraction above 50; x < 0 as
    2 exp(x^2) - erfcx(-x)."""
    k = _Consts(x, 1.0, 2.0, 100.0, 400.0, 4.0, 50.0, 5e7, _ISPI, 4.5, 5.0, 3.75, -26.7, -6.1,
                math.inf)
    ax = aten.abs.default(x)
    y = _erfcx_y100(_div(k[400.0], _add(ax, k[4.0])), k)
    x2 = _mul(x, x)
    frac = _div(_mul(k[_ISPI], _add(_mul(x2, _add(x2, k[4.5])), k[2.0])),
                _mul(x, _add(_mul(x2, _add(x2, k[5.0])), k[3.75])))
    pos = _where(_gt(x, k[5e7]), _div(k[_ISPI], x), _where(_gt(x, k[50.0]), frac, y))
    two_exp = _mul(_exp(x2), k[2.0])
    neg = _where(_lt(x, k[-26.7]), _full(x, math.inf),
                 _where(_lt(x, k[-6.1]), two_exp, _sub(two_exp, y)))
    out = _where(aten.ge.Scalar(x, 0), pos, neg)
    return _where(aten.isnan.default(x), x, out)


def _erfc(x):
    """erfc: 1 - erf(x) for |x| < 0.5 (no cancellation there), else
    exp(-x^2) erfcx(|x|), reflected as 2 - erfc(-x) for x < 0. x^2 is split
    as xh^2 + (x - xh)(x + xh) with xh = x to 6 fraction bits, so exp's
    argument is exact where erfc is tiny (|x| up to 10)."""
    k = _Consts(x, 0.5, 64.0, 2.0, 20.0)
    ax = aten.abs.default(x)
    ax = _where(_gt(ax, k[20.0]), k[20.0], ax)  # erfc is 0 from 10.1 on; keeps x * 64 finite
    xh = _div(aten.floor.default(_mul(ax, k[64.0])), k[64.0])
    e = _mul(_exp(aten.neg.default(_mul(xh, xh))),
             _exp(aten.neg.default(_mul(_sub(ax, xh), _add(ax, xh)))))
    tail = _mul(e, _erfcx(ax))
    big = _where(aten.lt.Scalar(x, 0), _sub(k[2.0], tail), tail)
    small = aten.rsub.Scalar(aten.erf.default(x), 1)
    return _where(_lt(ax, k[0.5]), small, big)


# ----------------------------------------------------------------- ndtri

_NDTRI_P0 = (-5.99633501014107895267E1, 9.80010754185999661536E1, -5.66762857469070293439E1,
             1.39312609387279679503E1, -1.23916583867381258016E0)
_NDTRI_Q0 = (1.0, 1.95448858338141759834E0, 4.67627912898881538453E0, 8.63602421390890590575E1,
             -2.25462687854119370527E2, 2.00260212380060660359E2, -8.20372256168333339912E1,
             1.59056225126211695515E1, -1.18331621121330003142E0)
_NDTRI_P1 = (4.05544892305962419923E0, 3.15251094599893866154E1, 5.71628192246421288162E1,
             4.40805073893200834700E1, 1.46849561928858024014E1, 2.18663306850790267539E0,
             -1.40256079171354495875E-1, -3.50424626827848203418E-2, -8.57456785154685413611E-4)
_NDTRI_Q1 = (1.0, 1.57799883256466749731E1, 4.53907635128879210584E1, 4.13172038254672030440E1,
             1.50425385692907503408E1, 2.50464946208309415979E0, -1.42182922854787788574E-1,
             -3.80806407691578277194E-2, -9.33259480895457427372E-4)
_NDTRI_P2 = (3.23774891776946035970E0, 6.91522889068984211695E0, 3.93881025292474443415E0,
             1.33303460815807542389E0, 2.01485389549179081538E-1, 1.23716634817820021358E-2,
             3.01581553508235416007E-4, 2.65806974686737550832E-6, 6.23974539184983293730E-9)
_NDTRI_Q2 = (1.0, 6.02427039364742014255E0, 3.67983563856160859403E0, 1.37702099489081330271E0,
             2.16236993594496635890E-1, 1.34204006088543189037E-2, 3.28014464682127739104E-4,
             2.89247864745380683936E-6, 6.79019408009981274425E-9)
_EXP_M2 = 0.13533528323661269189  # exp(-2)


def _ndtri(y0):
    """ATen's ``calc_ndtri`` (Cephes): a rational fit in y - 1/2 in the
    middle, in 1 / sqrt(-2 log y) in the tails."""
    k = _Consts(y0, 2.50662827463100050242, _EXP_M2, 0.5, -2.0, 8.0, math.inf, math.nan,
                P0=_NDTRI_P0, Q0=_NDTRI_Q0, P1=_NDTRI_P1, Q1=_NDTRI_Q1, P2=_NDTRI_P2, Q2=_NDTRI_Q2)
    flip = _gt(y0, aten.rsub.Scalar(k[_EXP_M2], 1))
    y = _where(flip, aten.rsub.Scalar(y0, 1), y0)
    ym = _sub(y, k[0.5])
    y2 = _mul(ym, ym)
    mid = _mul(_add(ym, _mul(ym, _div(_mul(y2, _polevl(y2, k.coeffs("P0"))),
                                      _polevl(y2, k.coeffs("Q0"))))),
               k[2.50662827463100050242])
    x = aten.sqrt.default(_mul(_log(y), k[-2.0]))
    x0 = _sub(x, _div(_log(x), x))
    z = aten.reciprocal.default(x)
    x1 = _where(_lt(x, k[8.0]),
                _div(_mul(z, _polevl(z, k.coeffs("P1"))), _polevl(z, k.coeffs("Q1"))),
                _div(_mul(z, _polevl(z, k.coeffs("P2"))), _polevl(z, k.coeffs("Q2"))))
    tail = _sub(x0, x1)
    tail = _where(flip, tail, aten.neg.default(tail))
    out = _where(_gt(y, k[_EXP_M2]), mid, tail)
    out = _where(_or(aten.lt.Scalar(y0, 0), aten.gt.Scalar(y0, 1)), k[math.nan], out)
    out = _where(aten.eq.Scalar(y0, 1), k[math.inf], out)
    return _where(aten.eq.Scalar(y0, 0), aten.neg.default(k[math.inf]), out)


# ----------------------------------------------------------------- frexp

@register_decomposition(aten.frexp.Tensor, scope=CAPTURE)
def frexp(x):
    """C's frexp without a bitcast (the compiler lowers none): x = m 2^e with
    0.5 <= |m| < 1, e from floor(log2 |x|) + 1 corrected by one step either
    way (log2 may round across a power of two); m is |x| times powers of
    two, one per bit of |e|, applied in turn: every product is exact and
    stays normal. 0, +-inf and NaN give (x, 0), as glibc. float32 only
    (denormal inputs are flushed to zero by the compiled code, as by every
    compiled op)."""
    if x.dtype != torch.float32:
        return NotImplemented
    k = _Consts(x, 0.5, 2.0, *(2.0 ** (2 ** i) for i in range(7)),
                *(2.0 ** -(2 ** i) for i in range(7)), *(2.0 ** -i for i in range(2, 8)))
    ax = aten.abs.default(x)
    ordinary = _and(aten.isfinite.default(x), aten.ne.Scalar(x, 0))
    safe = _where(ordinary, ax, aten.ones_like.default(ax))
    e = _add(aten.floor.default(aten.log2.default(safe)), 1)  # in [-125, 129]
    n = aten.abs.default(e)
    positive = aten.gt.Scalar(e, 0)
    m = safe
    for i in range(8):
        q = aten.floor.default(n if i == 0 else _mul(n, k[0.5 if i == 1 else 2.0 ** -i]))
        bit = aten.ne.Tensor(q, _mul(aten.floor.default(_mul(q, k[0.5])), k[2.0]))
        for power in ((6, 6) if i == 7 else (i,)):  # 2^128 is not a float: 2^64 twice
            factor = _where(positive, k[2.0 ** -(2 ** power)], k[2.0 ** (2 ** power)])
            m = _where(bit, _mul(m, factor), m)
    big = aten.ge.Scalar(m, 1)
    m, e = _where(big, _mul(m, k[0.5]), m), _where(big, _add(e, 1), e)
    small = _lt(m, k[0.5])
    m, e = _where(small, _mul(m, k[2.0]), m), _where(small, _sub(e, 1), e)
    m = _where(aten.lt.Scalar(x, 0), aten.neg.default(m), m)
    m = _where(ordinary, m, x)
    e = _where(ordinary, e, aten.zeros_like.default(e))
    return m, aten._to_copy.default(e, dtype=torch.int32)


@register_decomposition(aten.nextafter.default, scope=CAPTURE)
def nextafter(x, y):
    """C's nextafter without a bitcast: x moved by one ulp towards y, the ulp
    2^(e - 24) from ``frexp`` (half of it moving down from a power of two),
    taken at |x| * 2^64 so that it stays a normal float for tiny x; y where
    x == y (so the sign of a zero comes from y), NaN if either is NaN, the
    smallest denormal towards y from 0. float32 only; results that are
    denormal come back as the compiled code flushes them (to zero)."""
    if x.dtype != torch.float32 or y.dtype != torch.float32:
        return NotImplemented
    x, y = aten.broadcast_tensors.default([x, y])
    k = _Consts(x, 2.0 ** 64, 2.0 ** -64, 2.0 ** -24, 0.5, 1e-45, 3.4028234663852886e38, math.nan)
    ax = aten.abs.default(x)
    tiny = _lt(ax, k[2.0 ** -64])
    scaled = _where(tiny, _mul(ax, k[2.0 ** 64]), ax)
    m, _ = frexp(scaled)
    step = _div(_mul(scaled, k[2.0 ** -24]), m)  # 2^(e - 24): exact, and finite
    away = _eq(aten.gt.Tensor(y, x), aten.gt.Scalar(x, 0))  # |x| grows
    step = _where(_and(aten.logical_not.default(away), _eq(m, k[0.5])), _mul(step, k[0.5]), step)
    moved = _where(away, _add(scaled, step), _sub(scaled, step))
    moved = _where(tiny, _mul(moved, k[2.0 ** -64]), moved)
    out = _where(aten.lt.Scalar(x, 0), aten.neg.default(moved), moved)
    largest = _where(aten.gt.Scalar(x, 0), k[3.4028234663852886e38],
                     aten.neg.default(k[3.4028234663852886e38]))
    out = _where(aten.isinf.default(x), largest, out)  # towards a finite y (or the other inf)
    smallest = _where(aten.gt.Scalar(y, 0), k[1e-45], aten.neg.default(k[1e-45]))
    out = _where(aten.eq.Scalar(x, 0), smallest, out)
    out = _where(_eq(x, y), y, out)
    return _where(_or(aten.isnan.default(x), aten.isnan.default(y)), k[math.nan], out)


erfc = _float_op(_erfc)
erfcx = _float_op(_erfcx)
ndtri = _float_op(_ndtri)

# erfc and erfcx also before import: torch-mlir's own decomposition of
# special_log_ndtr, applied there, produces them.
for _scope in (CAPTURE, IMPORT):
    register_decomposition(aten.erfc.default, scope=_scope)(erfc)
    register_decomposition(aten.special_erfcx.default, scope=_scope)(erfcx)
register_decomposition(aten.special_ndtri.default, scope=CAPTURE)(ndtri)
