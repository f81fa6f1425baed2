"""Modified Bessel functions (``i0``, ``special_i0e``, ``special_i1``,
``special_i1e``, ``special_modified_bessel_{i0,i1,k0,k1}``,
``special_scaled_modified_bessel_{k0,k1}``) in aten ops, computed as ATen
computes them on the CPU: Cephes' Chebyshev expansions on two intervals,
evaluated by the same recurrence (``chbevl``) in the same order, with ATen's
coefficient tables (``ATen/native/Math.h``, copied below) rounded to float32.
Registered for capture time; float32 only (half, bfloat16 and
integers go through float32, as in ATen; float64 falls back).
"""
from __future__ import annotations

import math

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

# From ATen/native/Math.h (chebyshev_coefficients_i0e_A/B, i1e_A/B<float>).
I0E_A = (
    -4.4153416464793395e-18, 3.3307945188222384e-17, -2.431279846547955e-16,
    1.715391285555133e-15, -1.1685332877993451e-14, 7.676185498604936e-14,
    -4.856446783111929e-13, 2.95505266312964e-12, -1.726826291441556e-11,
    9.675809035373237e-11, -5.189795601635263e-10, 2.6598237246823866e-09,
    -1.300025009986248e-08, 6.046995022541919e-08, -2.670793853940612e-07,
    1.1173875391201037e-06, -4.4167383584587505e-06, 1.6448448070728896e-05,
    -5.754195010082104e-05, 0.00018850288509584165, -0.0005763755745385824,
    0.0016394756169413357, -0.004324309995050576, 0.010546460394594998,
    -0.02373741480589947, 0.04930528423967071, -0.09490109704804764,
    0.17162090152220877, -0.3046826723431984, 0.6767952744094761,
)

I0E_B = (
    -7.233180487874754e-18, -4.830504485944182e-18, 4.46562142029676e-17,
    3.461222867697461e-17, -2.8276239805165836e-16, -3.425485619677219e-16,
    1.7725601330565263e-15, 3.8116806693526224e-15, -9.554846698828307e-15,
    -4.150569347287222e-14, 1.54008621752141e-14, 3.8527783827421426e-13,
    7.180124451383666e-13, -1.7941785315068062e-12, -1.3215811840447713e-11,
    -3.1499165279632416e-11, 1.1889147107846439e-11, 4.94060238822497e-10,
    3.3962320257083865e-09, 2.266668990498178e-08, 2.0489185894690638e-07,
    2.8913705208347567e-06, 6.889758346916825e-05, 0.0033691164782556943,
    0.8044904110141088,
)

MODIFIED_BESSEL_I1_A = (
    2.7779141127610464e-18, -2.111421214358166e-17, 1.5536319577362005e-16,
    -1.1055969477353862e-15, 7.600684294735408e-15, -5.042185504727912e-14,
    3.223793365945575e-13, -1.9839743977649436e-12, 1.1736186298890901e-11,
    -6.663489723502027e-11, 3.625590281552117e-10, -1.8872497517228294e-09,
    9.381537386495773e-09, -4.445059128796328e-08, 2.0032947535521353e-07,
    -8.568720264695455e-07, 3.4702513081376785e-06, -1.3273163656039436e-05,
    4.781565107550054e-05, -0.00016176081582589674, 0.0005122859561685758,
    -0.0015135724506312532, 0.004156422944312888, -0.010564084894626197,
    0.024726449030626516, -0.05294598120809499, 0.1026436586898471,
    -0.17641651835783406, 0.25258718644363365,
)

MODIFIED_BESSEL_I1_B = (
    7.517296310842105e-18, 4.414348323071708e-18, -4.6503053684893586e-17,
    -3.209525921993424e-17, 2.96262899764595e-16, 3.3082023109209285e-16,
    -1.8803547755107825e-15, -3.8144030724370075e-15, 1.0420276984128802e-14,
    4.272440016711951e-14, -2.1015418427726643e-14, -4.0835511110921974e-13,
    -7.198551776245908e-13, 2.0356285441470896e-12, 1.4125807436613782e-11,
    3.2526035830154884e-11, -1.8974958123505413e-11, -5.589743462196584e-10,
    -3.835380385964237e-09, -2.6314688468895196e-08, -2.512236237870209e-07,
    -3.882564808877691e-06, -0.00011058893876262371, -0.009761097491361469,
    0.7785762350182801,
)

# ATen's float tables for i1e are the last terms of the double tables.
I1E_A_FLOAT = MODIFIED_BESSEL_I1_A[-17:]
I1E_B_FLOAT = MODIFIED_BESSEL_I1_B[-7:]


def _chbevl(y, coefficients):
    """ATen's ``chbevl``: b0 = y * b1 - b2 + c over the coefficients. They are
    one constant tensor, not one scalar each: lifted scalars would each be a
    graph input, and a dispatch binds at most 32 buffers."""
    table = torch.tensor(coefficients, dtype=y.dtype, device=y.device)
    zero = torch.zeros_like(y)
    b0 = aten.add.Tensor(zero, aten.select.int(table, 0, 0))
    b1 = b2 = zero
    for i in range(1, len(coefficients)):
        b2, b1 = b1, b0
        b0 = aten.add.Tensor(aten.sub.Tensor(aten.mul.Tensor(y, b1), b2),
                             aten.select.int(table, 0, i))
    return aten.mul.Tensor(aten.sub.Tensor(b0, b2), 0.5)


def _bessel(order: int, scaled: bool):
    a_table, b_table = (I0E_A, I0E_B) if order == 0 else (I1E_A_FLOAT, I1E_B_FLOAT)

    def decomposition(x_in):
        dtype = x_in.dtype
        if dtype == torch.float64 or dtype.is_complex:
            return NotImplemented
        result_dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
        x_in = aten._to_copy.default(x_in, dtype=torch.float32)
        x = aten.abs.default(x_in)
        small = aten.le.Scalar(x, 8.0)
        cheb_a = _chbevl(aten.sub.Tensor(aten.div.Tensor(x, 2.0), 2.0), a_table)
        cheb_b = _chbevl(aten.sub.Tensor(aten.div.Tensor(torch.full_like(x, 32.0), x), 2.0),
                         b_table)
        root = aten.sqrt.default(x)
        if scaled:  # i0e, i1e
            a = aten.mul.Tensor(cheb_a, x) if order else cheb_a
            b = aten.div.Tensor(cheb_b, root)
        else:  # i0, i1
            e = aten.exp.default(x)
            a = aten.mul.Tensor(aten.mul.Tensor(e, x), cheb_a) if order else \
                aten.mul.Tensor(e, cheb_a)
            b = aten.div.Tensor(aten.mul.Tensor(e, cheb_b), root)
        out = aten.where.self(small, a, b)
        if order:  # odd: the sign of the input
            out = aten.where.self(aten.lt.Scalar(x_in, 0.0), aten.neg.default(out), out)
        return aten._to_copy.default(out, dtype=result_dtype)
    return decomposition


i0 = _bessel(0, scaled=False)
i0e = _bessel(0, scaled=True)
i1 = _bessel(1, scaled=False)
i1e = _bessel(1, scaled=True)

# special.modified_bessel_* and scaled_modified_bessel_k*: ATen's
# ``*_forward`` in Math.h (the same scheme, tables of their own, below).
MODIFIED_BESSEL_I0_A = I0E_A  # ATen repeats the same table

MODIFIED_BESSEL_I0_B = I0E_B  # ATen repeats the same table


MODIFIED_BESSEL_K0_A = (
    1.374465435613523e-16, 4.25981614279661e-14, 1.0349695257633842e-11,
    1.904516377220209e-09, 2.5347910790261494e-07, 2.286212103119452e-05,
    0.001264615411446926, 0.0359799365153615, 0.3442898999246285,
    -0.5353273932339028,
)

MODIFIED_BESSEL_K0_B = (
    5.300433772686263e-18, -1.6475804301524212e-17, 5.2103915050390274e-17,
    -1.678231096805412e-16, 5.512055978524319e-16, -1.848593377343779e-15,
    6.3400764774050706e-15, -2.2275133269916698e-14, 8.032890775363575e-14,
    -2.9800969231727303e-13, 1.140340588208475e-12, -4.514597883373944e-12,
    1.8559491149547177e-11, -7.957489244477107e-11, 3.577397281400301e-10,
    -1.69753450938906e-09, 8.574034017414225e-09, -4.660489897687948e-08,
    2.766813639445015e-07, -1.8317555227191195e-06, 1.39498137188765e-05,
    -0.00012849549581627802, 0.0015698838857300533, -0.0314481013119645,
    2.4403030820659555,
)

MODIFIED_BESSEL_K1_A = (
    -7.023863479386288e-18, -2.427449850519366e-15, -6.666901694199329e-13,
    -1.4114883926335278e-10, -2.213387630734726e-08, -2.4334061415659684e-06,
    -0.0001730288957513052, -0.006975723859639864, -0.12261118082265715,
    -0.3531559607765449, 1.5253002273389478,
)

MODIFIED_BESSEL_K1_B = (
    -5.756744483665017e-18, 1.7940508731475592e-17, -5.689462558442859e-17,
    1.838093544366639e-16, -6.057047248373319e-16, 2.038703165624334e-15,
    -7.019837090418314e-15, 2.4771544244813043e-14, -8.976705182324994e-14,
    3.3484196660784293e-13, -1.2891739609510289e-12, 5.13963967348173e-12,
    -2.1299678384275683e-11, 9.218315187605006e-11, -4.1903547593418965e-10,
    2.015049755197033e-09, -1.0345762465678097e-08, 5.7410841254500495e-08,
    -3.5019606030878126e-07, 2.406484947837217e-06, -1.936197974166083e-05,
    0.00019521551847135162, -0.002857816859622779, 0.10392373657681724,
    2.7206261904844427,
)

SCALED_MODIFIED_BESSEL_K0_A = MODIFIED_BESSEL_K0_A  # ATen repeats the same table

SCALED_MODIFIED_BESSEL_K0_B = MODIFIED_BESSEL_K0_B  # ATen repeats the same table

SCALED_MODIFIED_BESSEL_K1_A = MODIFIED_BESSEL_K1_A  # ATen repeats the same table

SCALED_MODIFIED_BESSEL_K1_B = MODIFIED_BESSEL_K1_B  # ATen repeats the same table


def _f32(fn):
    """Run ``fn`` on float32 (ATen's float path), give the result dtype."""
    def decomposition(x_in):
        dtype = x_in.dtype
        if dtype == torch.float64 or dtype.is_complex:
            return NotImplemented
        result_dtype = dtype if dtype.is_floating_point else torch.get_default_dtype()
        out = fn(aten._to_copy.default(x_in, dtype=torch.float32))
        return aten._to_copy.default(out, dtype=result_dtype)
    return decomposition


def _mb_i(x, order: int):
    """modified_bessel_i0/i1_forward."""
    a_table, b_table = ((MODIFIED_BESSEL_I0_A, MODIFIED_BESSEL_I0_B) if order == 0 else
                        (MODIFIED_BESSEL_I1_A, MODIFIED_BESSEL_I1_B))
    ax = aten.abs.default(x)
    e = aten.exp.default(ax)
    cheb_a = _chbevl(aten.sub.Tensor(aten.div.Tensor(ax, 2.0), 2.0), a_table)
    cheb_b = _chbevl(aten.sub.Tensor(aten.div.Tensor(torch.full_like(ax, 32.0), ax), 2.0), b_table)
    b = aten.div.Tensor(aten.mul.Tensor(e, cheb_b), aten.sqrt.default(ax))
    if order == 0:
        return aten.where.self(aten.le.Scalar(ax, 8.0), aten.mul.Tensor(e, cheb_a), b)
    a = aten.mul.Tensor(aten.mul.Tensor(cheb_a, ax), e)
    out = aten.where.self(aten.le.Scalar(ax, 8.0), a, b)
    return aten.where.self(aten.lt.Scalar(x, 0.0), aten.neg.default(out), out)


def _mb_k(x, order: int, scaled: bool):
    """(scaled_)modified_bessel_k0/k1_forward: inf at 0, NaN below."""
    a_table, b_table = ((MODIFIED_BESSEL_K0_A, MODIFIED_BESSEL_K0_B) if order == 0 else
                        (MODIFIED_BESSEL_K1_A, MODIFIED_BESSEL_K1_B))
    if scaled:
        a_table, b_table = ((SCALED_MODIFIED_BESSEL_K0_A, SCALED_MODIFIED_BESSEL_K0_B)
                            if order == 0 else
                            (SCALED_MODIFIED_BESSEL_K1_A, SCALED_MODIFIED_BESSEL_K1_B))
    cheb_a = _chbevl(aten.sub.Tensor(aten.mul.Tensor(x, x), 2.0), a_table)
    cheb_b = _chbevl(aten.sub.Tensor(aten.div.Tensor(torch.full_like(x, 8.0), x), 2.0), b_table)
    log_half = aten.log.default(aten.mul.Tensor(x, 0.5))
    if order == 0:
        a = aten.sub.Tensor(cheb_a, aten.mul.Tensor(log_half, _mb_i(x, 0)))
    else:
        a = aten.add.Tensor(aten.mul.Tensor(log_half, _mb_i(x, 1)), aten.div.Tensor(cheb_a, x))
    b = aten.div.Tensor(cheb_b, aten.sqrt.default(x))
    if scaled:
        a = aten.mul.Tensor(a, aten.exp.default(x))
    else:
        b = aten.div.Tensor(aten.mul.Tensor(aten.exp.default(aten.neg.default(x)), cheb_b),
                            aten.sqrt.default(x))
    out = aten.where.self(aten.le.Scalar(x, 2.0), a, b)
    out = aten.where.self(aten.lt.Scalar(x, 0.0), torch.full_like(x, math.nan), out)
    return aten.where.self(aten.eq.Scalar(x, 0.0), torch.full_like(x, math.inf), out)


modified_bessel_i0 = _f32(lambda x: _mb_i(x, 0))
modified_bessel_i1 = _f32(lambda x: _mb_i(x, 1))
modified_bessel_k0 = _f32(lambda x: _mb_k(x, 0, scaled=False))
modified_bessel_k1 = _f32(lambda x: _mb_k(x, 1, scaled=False))
scaled_modified_bessel_k0 = _f32(lambda x: _mb_k(x, 0, scaled=True))
scaled_modified_bessel_k1 = _f32(lambda x: _mb_k(x, 1, scaled=True))

for _op, _fn in ((aten.special_modified_bessel_i0.default, modified_bessel_i0),
                 (aten.special_modified_bessel_i1.default, modified_bessel_i1),
                 (aten.special_modified_bessel_k0.default, modified_bessel_k0),
                 (aten.special_modified_bessel_k1.default, modified_bessel_k1),
                 (aten.special_scaled_modified_bessel_k0.default, scaled_modified_bessel_k0),
                 (aten.special_scaled_modified_bessel_k1.default, scaled_modified_bessel_k1),
                 (aten.i0.default, i0), (aten.special_i0e.default, i0e),
                 (aten.special_i1.default, i1), (aten.special_i1e.default, i1e)):
    register_decomposition(_op, scope=CAPTURE)(_fn)
