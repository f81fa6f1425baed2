"""Modified Bessel functions of the first kind (``i0``, ``special_i0e``,
``special_i1``, ``special_i1e``) in aten ops, computed as ATen computes them
on the CPU: Cephes' Chebyshev expansions on [0, 8] and (8, inf), evaluated by
the same recurrence (``chbevl``) in the same order, with the same float32
coefficient tables (``ATen/native/Math.h``, copied below). Used by
``capture_decompositions.py``; float32 only (half, bfloat16 and integers go
through float32, as in ATen; float64 falls back).
"""
from __future__ import annotations

import torch

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

I1E_A_FLOAT = (
    9.381537386495773e-09, -4.445059128796328e-08, 2.0032947535521353e-07,
    -8.568720264695455e-07, 3.4702513081376785e-06, -1.3273163656039436e-05,
    4.781565107550054e-05, -0.00016176081582589674, 0.0005122859561685758,
    -0.0015135724506312532, 0.004156422944312888, -0.010564084894626197,
    0.024726449030626516, -0.05294598120809499, 0.1026436586898471,
    -0.17641651835783406, 0.25258718644363365,
)

I1E_B_FLOAT = (
    -3.835380385964237e-09, -2.6314688468895196e-08, -2.512236237870209e-07,
    -3.882564808877691e-06, -0.00011058893876262371, -0.009761097491361469,
    0.7785762350182801,
)


def _chbevl(y, coefficients):
    """ATen's ``chbevl``: b0 = y * b1 - b2 + c over the coefficients. They are
    one constant tensor, not one scalar each: lifted scalars would each be a
    graph input, and a dispatch binds at most 32 buffers."""
    table = torch.tensor(coefficients, dtype=y.dtype, device=y.device)
    zero = aten.mul.Tensor(y, 0.0)
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

BESSEL_DECOMPOSITIONS = {
    aten.i0.default: i0,
    aten.special_i0e.default: i0e,
    aten.special_i1.default: i1,
    aten.special_i1e.default: i1e,
}
