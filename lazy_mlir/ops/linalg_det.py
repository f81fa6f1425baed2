"""``slogdet`` (and so ``logdet``) from the LU factorization, applied at
capture (``lazy/decompose.py``), as ATen computes it: the LU factors and
pivots of ``linalg_lu_factor_ex`` (captured as the unrolled factorization in
``linalg_lu.py``), the sign the product of the signs of U's
diagonal and of the row swaps, the log-magnitude the sum of log |U_ii|. A
singular matrix gives sign 0 and -inf, as eager.
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten


@register_decomposition(aten._linalg_slogdet.default, scope=CAPTURE)
def linalg_slogdet(a):
    """(sign, logabsdet, LU, pivots) of square ``a`` (..., n, n), real."""
    if a.dim() < 2 or a.shape[-1] != a.shape[-2] or not a.is_floating_point():
        return NotImplemented
    n = a.shape[-1]
    if 0 in a.shape[:-2]:  # an empty batch: empty results, nothing to compute
        batch = list(a.shape[:-2])
        return (aten.new_zeros.default(a, batch), aten.new_zeros.default(a, batch),
                aten.clone.default(a), aten.new_zeros.default(a, batch + [n], dtype=torch.int32))
    if n == 0:  # non-empty results of an empty input: folded at capture (lazy/empty_inputs.py)
        return NotImplemented
    lu, pivots, _ = aten.linalg_lu_factor_ex.default(a)
    diag = aten.diagonal.default(lu, 0, -2, -1)
    swaps = aten.ne.Tensor(pivots, aten.arange.start(1, n + 1, dtype=pivots.dtype,
                                                     device=a.device))
    odd = aten.remainder.Scalar(aten.sum.dim_IntList(swaps, [-1], False, dtype=torch.int64), 2)
    swap_sign = aten.sub.Tensor(aten.ones_like.default(odd, dtype=a.dtype),
                                aten.mul.Scalar(aten._to_copy.default(odd, dtype=a.dtype), 2))
    sign = aten.mul.Tensor(aten.prod.dim_int(aten.sign.default(diag), -1), swap_sign)
    logabsdet = aten.sum.dim_IntList(aten.log.default(aten.abs.default(diag)), [-1])
    return sign, logabsdet, lu, pivots


