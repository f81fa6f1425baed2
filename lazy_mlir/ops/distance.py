"""Pairwise p-norm distances: ``_cdist_forward`` (``torch.cdist``) and
``_pdist_forward`` (``F.pdist``), as ATen computes them on the CPU
(``ATen/native/Distance.cpp``, ``ATen/native/cpu/DistanceOpsKernel.cpp``).

``cdist_impl`` takes one of two routes, and eager's answer (rounding and
special values) depends on which, so the decomposition takes the same one:

- p == 2 with ``compute_mode`` 1 (``use_mm_for_euclid_dist``), or 0 (the
  default) and more than 25 rows on either side: ``_euclidean_dist``, one
  matmul of ``[-2 x1, |x1|^2, 1]`` by ``[x2, 1, |x2|^2]``, clamped at 0,
  square-rooted (rounding differs from the direct sum, and close rows can
  give a small positive distance instead of 0, as in eager);
- otherwise the direct reduction of ``|a - b|`` per pair: p = 0 counts the
  nonzero differences, 1 sums, 2 is the root of the sum of squares, inf is
  the max, other p sum ``|d|^p`` and take the ``1/p`` power.

Special values follow the kernels' scalar code: cdist's direct kernel is
scalar C++ whose inf-norm reduction is ``std::max(agg, up)`` starting from
0, which never takes a NaN (a NaN difference is skipped), while its p = 0
map ``std::min(ceil(|d|), 1)`` keeps NaN. pdist's kernel is vectorised
(``vec::maximum``/``minimum`` propagate NaN): a NaN difference makes that
distance NaN for every p.

Only float32/float64 (ATen dispatches floating types; we leave half and
bfloat16 to eager) and a bounded pairwise-difference tensor (``_MAX_DIFFS``
elements) are decomposed; the rest falls back.
"""
from __future__ import annotations

import math

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float64)
# The direct route materialises every difference: batch * r1 * r2 * m elements.
_MAX_DIFFS = 1 << 24
# pdist's pair indices are graph constants (two int64 vectors of this length).
_MAX_PAIRS = 1 << 20


def _map_reduce(ad, p, nan_max: bool):
    """The distance along the last dim of the absolute differences ``ad``
    (m >= 1). ``nan_max``: the inf norm propagates NaN (pdist's vectorised
    max) instead of skipping it (cdist's scalar ``std::max``)."""
    if p == 0:
        # min(ceil(|d|), 1): 1 for any nonzero difference (inf too), NaN kept
        nz = aten._to_copy.default(aten.ne.Scalar(ad, 0), dtype=ad.dtype)
        return aten.sum.dim_IntList(aten.where.self(aten.isnan.default(ad), ad, nz), [-1])
    if p == 1:
        return aten.sum.dim_IntList(ad, [-1])
    if p == 2:
        return aten.sqrt.default(aten.sum.dim_IntList(aten.mul.Tensor(ad, ad), [-1]))
    if math.isinf(p):
        nan = aten.isnan.default(ad)
        zero = torch.zeros((), dtype=ad.dtype, device=ad.device)
        # The NaN are replaced before the max: a compiled max may drop or keep them.
        out = aten.amax.default(aten.where.self(nan, zero, ad), [-1])
        if nan_max:
            any_nan = aten.any.dim(nan, -1)
            out = aten.where.self(any_nan, torch.full((), math.nan, dtype=ad.dtype,
                                                      device=ad.device), out)
        return out
    agg = aten.sum.dim_IntList(aten.pow.Tensor_Scalar(ad, p), [-1])
    return aten.pow.Tensor_Scalar(agg, 1.0 / p)


def _euclidean_dist(x1, x2):
    """ATen's ``_euclidean_dist`` on 3-d ``(batch, r, m)`` operands."""
    n1 = aten.sum.dim_IntList(aten.mul.Tensor(x1, x1), [-1], True)
    n2 = aten.sum.dim_IntList(aten.mul.Tensor(x2, x2), [-1], True)
    ones1 = aten.ones_like.default(n1)
    ones2 = aten.ones_like.default(n2)
    a = aten.cat.default([aten.mul.Scalar(x1, -2), n1, ones1], -1)
    b = aten.cat.default([x2, ones2, n2], -1)
    sq = aten.bmm.default(a, aten.transpose.int(b, 1, 2))
    # clamp_min(0) keeping NaN (a compiled max may not)
    zero = torch.zeros((), dtype=sq.dtype, device=sq.device)
    sq = aten.where.self(aten.lt.Scalar(sq, 0), zero, sq)
    return aten.sqrt.default(sq)


@register_decomposition(aten._cdist_forward.default, scope=CAPTURE)
def cdist_forward(x1, x2, p, compute_mode=None):
    """``_cdist_forward`` as ``cdist_impl`` (module docstring)."""
    if x1.dtype not in _FLOATS or x2.dtype != x1.dtype or x1.dim() < 2 or x2.dim() < 2:
        return NotImplemented
    if p < 0 or math.isnan(p) or x1.shape[-1] != x2.shape[-1]:
        return NotImplemented  # ATen raises
    mode = 0 if compute_mode is None else compute_mode
    if mode not in (0, 1, 2):
        return NotImplemented
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    batch = list(torch.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2])))
    out_shape = batch + [r1, r2]
    nb = math.prod(batch)
    if r1 == 0 or r2 == 0 or nb == 0:
        return torch.empty(out_shape, dtype=x1.dtype, device=x1.device)
    if m == 0:
        return torch.zeros(out_shape, dtype=x1.dtype, device=x1.device)
    a = aten.reshape.default(aten.expand.default(x1, batch + [r1, m]), [nb, r1, m])
    b = aten.reshape.default(aten.expand.default(x2, batch + [r2, m]), [nb, r2, m])
    if p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25))):
        return aten.reshape.default(_euclidean_dist(a, b), out_shape)
    if nb * r1 * r2 * m > _MAX_DIFFS:
        return NotImplemented
    diff = aten.sub.Tensor(aten.unsqueeze.default(a, 2), aten.unsqueeze.default(b, 1))
    out = _map_reduce(aten.abs.default(diff), p, nan_max=False)
    return aten.reshape.default(out, out_shape)


@register_decomposition(aten._pdist_forward.default, scope=CAPTURE)
def pdist_forward(x, p=2.0):
    """``_pdist_forward``: the distances of rows ``i < j`` of the 2-d ``x``
    in row-major pair order (module docstring)."""
    if x.dtype not in _FLOATS or x.dim() != 2 or p < 0 or math.isnan(p):
        return NotImplemented
    n, m = x.shape
    pairs = n * (n - 1) // 2
    if n <= 1:
        return torch.empty([0], dtype=x.dtype, device=x.device)
    if m == 0:
        return torch.zeros([pairs], dtype=x.dtype, device=x.device)
    if pairs * m > _MAX_DIFFS or pairs > _MAX_PAIRS:
        return NotImplemented
    return _map_reduce(aten.abs.default(_pair_differences(x)[2]), p, nan_max=True)


def _pair_differences(x):
    """(i, j, x[i] - x[j]) over the pairs ``i < j`` of ``x``'s rows in
    row-major pair order: the pattern depends on the row count only, two
    constant index vectors."""
    n = x.shape[0]
    i = torch.tensor([a for a in range(n) for _ in range(a + 1, n)], dtype=torch.int64,
                     device=x.device)
    j = torch.tensor([b for a in range(n) for b in range(a + 1, n)], dtype=torch.int64,
                     device=x.device)
    return i, j, aten.sub.Tensor(aten.index_select.default(x, 0, i),
                                 aten.index_select.default(x, 0, j))


@register_decomposition(aten._pdist_backward.default, scope=CAPTURE)
def pdist_backward(grad, x, p, pdist):
    """``_pdist_backward``: each pair's term (``_pair_gradient``) added to
    its first row and taken from its second, as ATen's kernel sums them (it
    ran eagerly: a host round trip per step of a triplet or contrastive loss
    on ``F.pdist``)."""
    if x.dtype not in _FLOATS or x.dim() != 2 or p < 0 or math.isnan(p):
        return NotImplemented
    n, m = x.shape
    if p == 0 or n <= 1 or m == 0:
        return torch.zeros_like(x)
    if n * (n - 1) // 2 * m > _MAX_DIFFS or n * (n - 1) // 2 > _MAX_PAIRS:
        return NotImplemented
    i, j, diff = _pair_differences(x)
    terms = _pair_gradient(diff, aten.unsqueeze.default(grad, -1),
                           aten.unsqueeze.default(pdist, -1), p)
    out = aten.index_add.default(torch.zeros_like(x), 0, i, terms)
    return aten.index_add.default(out, 0, j, aten.neg.default(terms))




def _pair_gradient(diff, grad, dist, p):
    """Each pair's term of ``_cdist_backward`` (``DistanceOpsKernel.cpp``'s
    ``backward`` of its p's norm), on differences ``x1_i - x2_j``."""
    zero = torch.zeros((), dtype=diff.dtype, device=diff.device)
    at_zero = aten.eq.Scalar(dist, 0)
    if p == 1:
        return aten.mul.Tensor(grad, aten.sign.default(diff))
    if p == 2:
        return aten.where.self(at_zero, zero, aten.div.Tensor(aten.mul.Tensor(grad, diff), dist))
    if math.isinf(p):
        hit = aten.eq.Tensor(aten.abs.default(diff), dist)
        return aten.mul.Tensor(aten.mul.Tensor(grad, aten.sign.default(diff)),
                               aten._to_copy.default(hit, dtype=diff.dtype))
    if p < 2:
        term = aten.mul.Tensor(aten.mul.Tensor(aten.sign.default(diff), aten.pow.Tensor_Scalar(
            aten.abs.default(diff), p - 1)), grad)
        term = aten.where.self(at_zero, zero, aten.div.Tensor(term, aten.pow.Tensor_Scalar(
            dist, p - 1)))
        if p < 1:
            term = aten.where.self(aten.eq.Scalar(diff, 0), zero, term)
        return term
    term = aten.mul.Tensor(aten.mul.Tensor(diff, aten.pow.Tensor_Scalar(aten.abs.default(diff),
                                                                        p - 2)), grad)
    return aten.where.self(at_zero, zero, aten.div.Tensor(term, aten.pow.Tensor_Scalar(dist,
                                                                                        p - 1)))


@register_decomposition(aten._cdist_backward.default, scope=CAPTURE)
def cdist_backward(grad, x1, x2, p, cdist):
    """``_cdist_backward``: the gradient of ``x1`` (at the batch shape both
    broadcast to; autograd sums it back), the sum over ``x2``'s rows of each
    pair's term. (It ran eagerly: a host round trip per step of a metric
    learning loss.)"""
    if (x1.dtype not in _FLOATS or x2.dtype != x1.dtype or x1.dim() < 2 or x2.dim() < 2
            or p < 0 or math.isnan(p)):
        return NotImplemented
    r1, r2, m = x1.shape[-2], x2.shape[-2], x1.shape[-1]
    batch = list(torch.broadcast_shapes(tuple(x1.shape[:-2]), tuple(x2.shape[:-2])))
    nb = math.prod(batch)
    if p == 0 or 0 in (r1, r2, m, nb):
        return torch.zeros(batch + [r1, m], dtype=x1.dtype, device=x1.device)
    if nb * r1 * r2 * m > _MAX_DIFFS:
        return NotImplemented
    a = aten.reshape.default(aten.expand.default(x1, batch + [r1, m]), [nb, r1, 1, m])
    b = aten.reshape.default(aten.expand.default(x2, batch + [r2, m]), [nb, 1, r2, m])
    g = aten.reshape.default(aten.expand.default(grad, batch + [r1, r2]), [nb, r1, r2, 1])
    d = aten.reshape.default(aten.expand.default(cdist, batch + [r1, r2]), [nb, r1, r2, 1])
    terms = _pair_gradient(aten.sub.Tensor(a, b), g, d, p)
    return aten.reshape.default(aten.sum.dim_IntList(terms, [2]), batch + [r1, m])
