"""Bessel functions of the first and second kind (``special_bessel_j0``,
``_j1``, ``_y0``, ``_y1``) and ``special_spherical_bessel_j0`` in aten ops,
computed as ATen computes them on the CPU (``*_forward`` in
``ATen/native/Math.h``: Cephes' rational approximations below 5, Hankel
asymptotic forms above), same operations in the same order, ATen's tables
(copied below) rounded to float32. Float32 only (integers go through
float32; float64 falls back). Registered for capture time.
"""
from __future__ import annotations

import math

import torch

from .bessel import _f32
from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

# From ATen/native/Math.h (bessel_{j0,j1,y0,y1}_forward).
BESSEL_J0_PP = (
    0.0007969367292973471, 0.08283523921074408, 1.239533716464143,
    5.447250030587687, 8.74716500199817, 5.303240382353949,
    1.0,
)

BESSEL_J0_PQ = (
    0.0009244088105588637, 0.08562884743544745, 1.2535274390105895,
    5.470977403304171, 8.761908832370695, 5.306052882353947,
    1.0,
)

BESSEL_J0_QP = (
    -0.011366383889846916, -1.2825271867050931, -19.553954425773597,
    -93.20601521237683, -177.68116798048806, -147.07750515495118,
    -51.41053267665993, -6.050143506007285,
)

BESSEL_J0_QQ = (
    64.3178256118178, 856.4300259769806, 3882.4018360540163,
    7240.467741956525, 5930.727011873169, 2062.0933166032783,
    242.0057402402914,
)

BESSEL_J0_RP = (
    -4794432209.782018, 1956174919465.5657, -249248344360967.72,
    9708622510473064.0,
)

BESSEL_J0_RQ = (
    499.563147152651, 173785.4016763747, 48440965.83399621,
    11185553704.535683, 2112775201154.892, 310518229857422.56,
    3.1812195594320496e+16, 1.7108629408104315e+18,
)

BESSEL_J1_PP = (
    0.0007621256162081731, 0.07313970569409176, 1.1271960812968493,
    5.112079511468076, 8.424045901417724, 5.214515986823615,
    1.0,
)

BESSEL_J1_PQ = (
    0.0005713231280725487, 0.06884559087544954, 1.105142326340617,
    5.073863861286015, 8.399855543276042, 5.209828486823619,
    1.0,
)

BESSEL_J1_QP = (
    0.05108625947501766, 4.982138729512334, 75.82382841325453,
    366.7796093601508, 710.8563049989261, 597.4896124006136,
    211.68875710057213, 25.207020585802372,
)

BESSEL_J1_QQ = (
    74.23732770356752, 1056.4488603826283, 4986.410583376536,
    9562.318924047562, 7997.041604473507, 2826.1927851763908,
    336.0936078106983,
)

BESSEL_J1_RP = (
    -899971225.7055594, 452228297998.19403, -72749424522181.83,
    3682957328638529.0,
)

BESSEL_J1_RQ = (
    620.8364781180543, 256987.25675774884, 83514679.14319493,
    22151159547.97925, 4749141220799.914, 784369607876235.9,
    8.952223361846274e+16, 5.322786203326801e+18,
)

BESSEL_Y0_PP = (
    0.0007969367292973471, 0.08283523921074408, 1.239533716464143,
    5.447250030587687, 8.74716500199817, 5.303240382353949,
    1.0,
)

BESSEL_Y0_PQ = (
    0.0009244088105588637, 0.08562884743544745, 1.2535274390105895,
    5.470977403304171, 8.761908832370695, 5.306052882353947,
    1.0,
)

BESSEL_Y0_QP = (
    -0.011366383889846916, -1.2825271867050931, -19.553954425773597,
    -93.20601521237683, -177.68116798048806, -147.07750515495118,
    -51.41053267665993, -6.050143506007285,
)

BESSEL_Y0_QQ = (
    64.3178256118178, 856.4300259769806, 3882.4018360540163,
    7240.467741956525, 5930.727011873169, 2062.0933166032783,
    242.0057402402914,
)

BESSEL_Y0_YP = (
    15592.436785523574, -14663929.59039716, 5435264770.518765,
    -982136065717.9115, 87590639439536.7, -3466283033847297.0,
    4.4273326857256984e+16, -1.8495080043698668e+16,
)

BESSEL_Y0_YQ = (
    1041.2835366425984, 626107.330137135, 268919633.39381415,
    86400248710.3935, 20297961275010.555, 3171577528429750.5,
    2.5059625617265306e+17,
)

BESSEL_Y1_PP = (
    0.0007621256162081731, 0.07313970569409176, 1.1271960812968493,
    5.112079511468076, 8.424045901417724, 5.214515986823615,
    1.0,
)

BESSEL_Y1_PQ = (
    0.0005713231280725487, 0.06884559087544954, 1.105142326340617,
    5.073863861286015, 8.399855543276042, 5.209828486823619,
    1.0,
)

BESSEL_Y1_QP = (
    0.05108625947501766, 4.982138729512334, 75.82382841325453,
    366.7796093601508, 710.8563049989261, 597.4896124006136,
    211.68875710057213, 25.207020585802372,
)

BESSEL_Y1_QQ = (
    74.23732770356752, 1056.4488603826283, 4986.410583376536,
    9562.318924047562, 7997.041604473507, 2826.1927851763908,
    336.0936078106983,
)

BESSEL_Y1_YP = (
    1263204747.9017804, -647355876379.1603, 114509511541823.73,
    -8127702555013251.0, 2.024394757135949e+17, -7.788771962659501e+17,
)

BESSEL_Y1_YQ = (
    594.3015923461282, 235564.09294306856, 73481194.44597217,
    18760131610.870617, 3882312774962.3857, 620557727146953.8,
    6.871410873553005e+16, 3.9727060811656064e+18,
)

_PI_4 = 0.785398163397448309615660845819875721
_3PI_4 = 2.356194490192344928846982537459627163
_SQRT_2_PI = 0.797884560802865355879892119868763737
_2_PI = 0.636619772367581343075535053490057448


def _horner(z, coefficients):
    """ATen's loops: r = 0; r = r * z + c over the coefficients (one constant
    tensor: lifted scalars would each be a graph input)."""
    table = torch.tensor(coefficients, dtype=z.dtype, device=z.device)
    r = torch.zeros_like(z)
    for i in range(len(coefficients)):
        r = aten.add.Tensor(aten.mul.Tensor(r, z), aten.select.int(table, 0, i))
    return r


def _ratio(z, p, q):
    return aten.div.Tensor(_horner(z, p), _horner(z, q))


def _hankel(x, z, tables, shift, first, second):
    """(pp/pq * first(x - shift) -/+ 5/x * (qp/qq) * second(x - shift)) *
    sqrt(2/pi) / sqrt(x): the large-x branch of all four."""
    pp, pq, qp, qq = tables
    arg = aten.sub.Tensor(x, shift)
    lead = aten.mul.Tensor(_ratio(z, pp, pq), first(arg))
    tail = aten.mul.Tensor(aten.mul.Tensor(aten.div.Tensor(torch.full_like(x, 5.0), x),
                                           _ratio(z, qp, qq)), second(arg))
    inner = aten.sub.Tensor(lead, tail) if first is aten.cos.default else \
        aten.add.Tensor(lead, tail)
    return aten.div.Tensor(aten.mul.Tensor(inner, _SQRT_2_PI), aten.sqrt.default(x))


def _z25(x):  # 25 / (x * x)
    return aten.div.Tensor(torch.full_like(x, 25.0), aten.mul.Tensor(x, x))


def _z5(x):  # 5 / x * (5 / x)
    f = aten.div.Tensor(torch.full_like(x, 5.0), x)
    return aten.mul.Tensor(f, f)


def _j0(x):
    x = aten.abs.default(x)
    xx = aten.mul.Tensor(x, x)
    small = aten.div.Tensor(aten.mul.Tensor(aten.mul.Tensor(
        aten.sub.Tensor(xx, 5.78318596294678452118e+00),
        aten.sub.Tensor(xx, 3.04712623436620863991e+01)), _horner(xx, BESSEL_J0_RP)),
        _horner(xx, BESSEL_J0_RQ))
    tiny = aten.rsub.Scalar(aten.div.Tensor(xx, 4.0), 1.0)
    small = aten.where.self(aten.lt.Scalar(x, 0.00001), tiny, small)
    large = _hankel(x, _z25(x), (BESSEL_J0_PP, BESSEL_J0_PQ, BESSEL_J0_QP, BESSEL_J0_QQ), _PI_4,
                    aten.cos.default, aten.sin.default)
    return aten.where.self(aten.le.Scalar(x, 5.0), small, large)


def _j1(x_in):
    x = aten.abs.default(x_in)  # j1(-x) = -j1(x)
    xx = aten.mul.Tensor(x, x)
    small = aten.mul.Tensor(aten.mul.Tensor(aten.mul.Tensor(
        _ratio(xx, BESSEL_J1_RP, BESSEL_J1_RQ), x),
        aten.sub.Tensor(xx, 1.46819706421238932572e+01)),
        aten.sub.Tensor(xx, 4.92184563216946036703e+01))
    large = _hankel(x, _z5(x), (BESSEL_J1_PP, BESSEL_J1_PQ, BESSEL_J1_QP, BESSEL_J1_QQ), _3PI_4,
                    aten.cos.default, aten.sin.default)
    out = aten.where.self(aten.le.Scalar(x, 5.0), small, large)
    return aten.where.self(aten.lt.Scalar(x_in, 0.0), aten.neg.default(out), out)


def _y_edges(x, small, large):
    """x <= 5: -inf at 0, NaN below; the large branch otherwise."""
    out = aten.where.self(aten.le.Scalar(x, 5.0), small, large)
    out = aten.where.self(aten.lt.Scalar(x, 0.0), torch.full_like(x, math.nan), out)
    return aten.where.self(aten.eq.Scalar(x, 0.0), torch.full_like(x, -math.inf), out)


def _y0(x):
    xx = aten.mul.Tensor(x, x)
    small = aten.add.Tensor(_ratio(xx, BESSEL_Y0_YP, BESSEL_Y0_YQ), aten.mul.Tensor(
        aten.mul.Tensor(aten.log.default(x), _2_PI), _j0(x)))
    large = _hankel(x, _z25(x), (BESSEL_Y0_PP, BESSEL_Y0_PQ, BESSEL_Y0_QP, BESSEL_Y0_QQ), _PI_4,
                    aten.sin.default, aten.cos.default)
    return _y_edges(x, small, large)


def _y1(x):
    xx = aten.mul.Tensor(x, x)
    small = aten.add.Tensor(
        aten.mul.Tensor(x, _ratio(xx, BESSEL_Y1_YP, BESSEL_Y1_YQ)),
        aten.mul.Tensor(aten.sub.Tensor(aten.mul.Tensor(_j1(x), aten.log.default(x)),
                                        aten.reciprocal.default(x)), _2_PI))
    large = _hankel(x, _z5(x), (BESSEL_Y1_PP, BESSEL_Y1_PQ, BESSEL_Y1_QP, BESSEL_Y1_QQ), _3PI_4,
                    aten.sin.default, aten.cos.default)
    return _y_edges(x, small, large)


def _spherical_j0(x):
    """1 + x^2 (-1/6 + x^2 (1/120 + ...)) below 0.5, sin(x)/x above, 0 at +-inf."""
    xx = aten.mul.Tensor(x, x)
    series = torch.full_like(x, 1.0 / 6227020800.0)
    for c in (-1.0 / 39916800.0, 1.0 / 362880.0, -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0):
        series = aten.add.Tensor(aten.mul.Tensor(xx, series), c)
    series = aten.add.Tensor(aten.mul.Tensor(xx, series), 1.0)
    out = aten.where.self(aten.lt.Scalar(aten.abs.default(x), 0.5), series,
                          aten.div.Tensor(aten.sin.default(x), x))
    return aten.where.self(aten.isinf.default(x), torch.zeros_like(x), out)


register_decomposition(aten.special_bessel_j0.default, scope=CAPTURE)(_f32(_j0))
register_decomposition(aten.special_bessel_j1.default, scope=CAPTURE)(_f32(_j1))
register_decomposition(aten.special_bessel_y0.default, scope=CAPTURE)(_f32(_y0))
register_decomposition(aten.special_bessel_y1.default, scope=CAPTURE)(_f32(_y1))
register_decomposition(aten.special_spherical_bessel_j0.default, scope=CAPTURE)(_f32(_spherical_j0))
