"""``embedding_bag`` (``_embedding_bag_forward_only``, and ``_embedding_bag``,
which torch-mlir lowers wrongly: ``support.DENIED``) as ATen's CPU
implementation computes it (``ATen/native/EmbeddingBag.cpp``), all four
results included, since autograd's ``_embedding_bag_backward`` reads them.

The bags come from the ``offsets`` tensor (values, read in the graph): index
``i`` belongs to bag ``offset2bag[i] = #{b < num_bags : offsets[b] <= i} - 1``
(``make_offset2bag``; with ``include_last_offset`` the last offset only ends
the list). Rows equal to ``padding_idx`` (>= 0; ATen passes -1 for none)
are skipped. Per bag:

- sum: the sum of ``weight[index]`` (times ``per_sample_weights[i]``), 0
  for an empty bag; masked by ``where``, so an infinite row of another bag
  cannot make NaN here (a masked matmul would: 0 * inf). On ATen's fast
  path (float32 weight with unit column stride, unit-stride or no
  per-sample weights, no padding index) with ``include_last_offset`` the
  last bag ends at the last offset, not at the end of the indices;
- mean: that sum divided by ``max(bag_size, 1)``, ``bag_size`` computed as
  ATen does (offset differences, the last bag up to the end of the indices,
  minus its padded entries);
- max: per column, the kernel's scan ``if (first || w > cur) cur = w``: the
  first element when it is NaN, else the first element equal to the largest
  non-NaN value (so -0.0 before 0.0 stays -0.0); ``max_indices`` holds the
  weight row it came from; an empty bag gives 0 and index 0.

The other results as ATen leaves them: ``offset2bag`` is empty on the sum
fast path, else the bag of each index;
``bag_size`` is the per-bag count for mean and max, zeros for sum (as many
as the offsets in the forward-only op, as the bags in ``_embedding_bag``);
``max_indices`` is ``bag_size`` again for sum and mean.

Eager checks the values of ``indices`` and ``offsets`` (in range, first
offset 0, sorted) and raises; a graph cannot, so invalid values give some
result instead of an error. Only float32/float64 weights with int64
indices and offsets, at least one bag, index and column, and a bounded
(bags x indices x columns) mask; the rest falls back.
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float64)
_MAX_MASKED = 1 << 24
_SUM, _MEAN, _MAX = 0, 1, 2


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=-1, *,
                   forward_only: bool):
    if weight.dtype not in _FLOATS or weight.dim() != 2 or indices.dim() != 1 \
            or offsets.dim() != 1 or indices.dtype != torch.int64 \
            or offsets.dtype != torch.int64 or mode not in (_SUM, _MEAN, _MAX):
        return NotImplemented
    psw = per_sample_weights
    if psw is not None and (mode != _SUM or psw.dtype != weight.dtype
                            or tuple(psw.shape) != tuple(indices.shape)):
        return NotImplemented  # eager raises
    n, n_off, cols = indices.shape[0], offsets.shape[0], weight.shape[1]
    bags = n_off - 1 if include_last_offset else n_off
    if bags <= 0 or n == 0 or cols == 0 or bags * n * cols > _MAX_MASKED:
        return NotImplemented
    dev, i64 = weight.device, torch.int64
    pos = aten.arange.default(n, dtype=i64, device=dev)
    starts = aten.slice.Tensor(offsets, 0, 0, bags)
    # offset2bag[i] = #(offsets[:bags] <= i) - 1
    below = aten.le.Tensor(aten.unsqueeze.default(starts, 0), aten.unsqueeze.default(pos, 1))
    offset2bag = aten.sub.Scalar(aten.sum.dim_IntList(aten._to_copy.default(below, dtype=i64),
                                                      [1]), 1)
    keep = (aten.ne.Scalar(indices, padding_idx) if padding_idx >= 0
            else torch.ones([n], dtype=torch.bool, device=dev))
    bag_ids = aten.arange.default(bags, dtype=i64, device=dev)
    member = aten.eq.Tensor(aten.unsqueeze.default(offset2bag, 0),
                            aten.unsqueeze.default(bag_ids, 1))            # (bags, n)
    used = aten.logical_and.default(member, aten.unsqueeze.default(keep, 0))
    fast = (weight.dtype == torch.float32 and weight.stride(1) == 1
            and (psw is None or psw.stride(0) == 1) and padding_idx < 0)
    if fast and mode != _MAX and include_last_offset:
        # The fast sum loops over offsets[b]..offsets[b + 1]: indices past the
        # last offset are left out of the last bag (its bag_size still counts them).
        inside = aten.lt.Tensor(pos, aten.slice.Tensor(offsets, 0, bags, bags + 1))
        used = aten.logical_and.default(used, aten.unsqueeze.default(inside, 0))
    rows = aten.index_select.default(weight, 0, indices)                  # (n, cols)
    zero = torch.zeros((), dtype=weight.dtype, device=dev)

    # bag_size as make_bag_size_out, minus the padded entries of each bag
    padded = aten.sum.dim_IntList(aten._to_copy.default(
        aten.logical_and.default(member, aten.unsqueeze.default(aten.logical_not.default(keep), 0)),
        dtype=i64), [1])
    # bag b ends where bag b + 1 starts, the last one at the end of the indices
    ends = aten.cat.default([aten.slice.Tensor(offsets, 0, 1, bags),
                             torch.full([1], n, dtype=i64, device=dev)])
    bag_size = aten.sub.Tensor(aten.sub.Tensor(ends, starts), padded)

    if mode == _MAX:
        output, max_indices = _bag_max(rows, used, indices, n, bags, cols)
    else:
        contrib = rows if psw is None else aten.mul.Tensor(rows, aten.unsqueeze.default(psw, 1))
        masked = aten.where.self(aten.unsqueeze.default(used, 2),
                                 aten.unsqueeze.default(contrib, 0), zero)  # (bags, n, cols)
        output = aten.sum.dim_IntList(masked, [1])
        if mode == _MEAN:
            div = aten._to_copy.default(aten.clamp_min.default(bag_size, 1), dtype=weight.dtype)
            output = aten.div.Tensor(output, aten.unsqueeze.default(div, 1))
    if mode == _SUM:
        bag_size = torch.zeros([n_off if forward_only else bags], dtype=i64, device=dev)
    if mode != _MAX:
        max_indices = aten.clone.default(bag_size)
    if fast and mode == _SUM:
        offset2bag = torch.zeros([0], dtype=i64, device=dev)
    return output, offset2bag, bag_size, max_indices


def _bag_max(rows, used, indices, n, bags, cols):
    """Per bag and column, the kernel's running max (module docstring)."""
    dev, i64 = rows.device, torch.int64
    pos = aten.arange.default(n, dtype=i64, device=dev)
    none = torch.full((), n, dtype=i64, device=dev)
    # first used position of each bag (n: empty bag)
    first = aten.amin.default(aten.where.self(used, aten.unsqueeze.default(pos, 0), none), [1])
    empty = aten.eq.Scalar(first, n)
    first_c = aten.clamp_max.default(first, n - 1)
    first_val = aten.index_select.default(rows, 0, first_c)                 # (bags, cols)
    vals = aten.unsqueeze.default(rows, 0)                                   # (1, n, cols)
    ok = aten.logical_and.default(aten.unsqueeze.default(used, 2),
                                  aten.logical_not.default(aten.isnan.default(vals)))
    ninf = torch.full((), float("-inf"), dtype=rows.dtype, device=dev)
    top = aten.amax.default(aten.where.self(ok, vals, ninf), [1], True)     # (bags, 1, cols)
    hit = aten.logical_and.default(ok, aten.eq.Tensor(vals, top))
    at = aten.amin.default(aten.where.self(hit, aten.view.default(pos, [1, n, 1]), none), [1])
    first_nan = aten.isnan.default(first_val)
    at = aten.where.self(first_nan, aten.unsqueeze.default(first_c, 1), at)
    at = aten.clamp_max.default(at, n - 1)                           # (bags, cols)
    flat_at = aten.reshape.default(at, [-1])
    col = aten.repeat.default(aten.arange.default(cols, dtype=i64, device=dev), [bags])
    value = aten.reshape.default(aten.index.Tensor(rows, [flat_at, col]), [bags, cols])
    word = aten.reshape.default(aten.index_select.default(indices, 0, flat_at), [bags, cols])
    is_empty = aten.unsqueeze.default(empty, 1)
    value = aten.where.self(is_empty, torch.zeros((), dtype=rows.dtype, device=dev), value)
    word = aten.where.self(is_empty, torch.zeros((), dtype=i64, device=dev), word)
    return value, word


@register_decomposition(aten.embedding_renorm.default, scope=CAPTURE)
def embedding_renorm(weight, indices, max_norm, norm_type):
    """``embedding_renorm_`` (what ``max_norm`` does before the lookup), as
    ``embedding_renorm_cpu_``: every row named by ``indices`` (once) whose
    ``linalg_vector_norm`` exceeds ``max_norm`` is scaled by ``max_norm /
    (norm + 1e-7)``, computed in double and applied in the weight's dtype; a
    NaN norm leaves the row alone. Out-of-range indices (eager raises) are
    ignored."""
    if weight.dtype not in _FLOATS or weight.dim() != 2 or indices.dtype not in (
            torch.int64, torch.int32) or weight.shape[0] * max(indices.numel(), 1) > _MAX_MASKED:
        return NotImplemented
    dev, rows = weight.device, weight.shape[0]
    if indices.numel() == 0 or weight.numel() == 0:
        return aten.clone.default(weight)
    flat = aten.reshape.default(aten._to_copy.default(indices, dtype=torch.int64), [-1])
    ids = aten.arange.default(rows, dtype=torch.int64, device=dev)
    named = aten.any.dim(aten.eq.Tensor(aten.unsqueeze.default(ids, 1),
                                        aten.unsqueeze.default(flat, 0)), 1)
    norm = aten._to_copy.default(aten.linalg_vector_norm.default(weight, norm_type, [1]),
                                 dtype=torch.float64)
    scale = aten.div.Tensor(torch.full((), max_norm, dtype=torch.float64, device=dev),
                            aten.add.Scalar(norm, 1e-7))
    scaled = aten.mul.Tensor(weight, aten.unsqueeze.default(
        aten._to_copy.default(scale, dtype=weight.dtype), 1))
    shrink = aten.logical_and.default(named, aten.gt.Scalar(norm, max_norm))
    return aten.where.self(aten.unsqueeze.default(shrink, 1), scaled, weight)


@register_decomposition(aten._embedding_bag_forward_only.default, scope=CAPTURE)
def embedding_bag_forward_only(*args, **kwargs):
    return _embedding_bag(*args, **kwargs, forward_only=True)


@register_decomposition(aten._embedding_bag.default, scope=CAPTURE)
def embedding_bag(*args, **kwargs):
    return _embedding_bag(*args, **kwargs, forward_only=False)




@register_decomposition(aten._embedding_bag_backward.default, scope=CAPTURE)
def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    """The dense weight gradient of sum and mean bags, as ATen's
    ``_embedding_bag_dense_backward`` computes it: each index's row gets its
    bag's gradient (times its per-sample weight, or over its bag's size for
    mean; none for ``padding_idx``), accumulated (``index_put``). An empty
    ``offset2bag`` (the sum fast path) is made again from all the offsets,
    as ATen's backward does (``make_offset2bag``). Max bags: ``_max_backward``.
    Sparse gradients (a sparse result) and ``scale_grad_by_freq`` of sum and
    mean bags keep the op (ATen's CPU scales an index's rows by counts this
    did not reproduce: 2/3 for an index seen twice among 8)."""
    if sparse or mode not in (_SUM, _MEAN, _MAX) or grad.dim() != 2 \
            or grad.dtype not in _FLOATS or indices.dim() != 1 or indices.dtype != torch.int64 \
            or offsets.dtype != torch.int64 or indices.shape[0] == 0:
        return NotImplemented
    if mode == _MAX:
        return _max_backward(grad, bag_size, maximum_indices, num_weights)
    if scale_grad_by_freq:
        return NotImplemented
    n, dev, i64 = indices.shape[0], grad.device, torch.int64
    if offset2bag.numel() != n:  # offset2bag[i] = #(offsets <= i) - 1
        pos = aten.arange.default(n, dtype=i64, device=dev)
        below = aten.le.Tensor(aten.unsqueeze.default(offsets, 0), aten.unsqueeze.default(pos, 1))
        offset2bag = aten.sub.Scalar(aten.sum.dim_IntList(
            aten._to_copy.default(below, dtype=i64), [1]), 1)
    rows = aten.index_select.default(grad, 0, offset2bag)                     # (n, cols)
    scale = None
    if mode == _MEAN:
        size = aten.index_select.default(bag_size, 0, offset2bag)
        scale = aten.reciprocal.default(aten._to_copy.default(size, dtype=grad.dtype))
    elif per_sample_weights is not None:
        scale = per_sample_weights
    if padding_idx >= 0:
        keep = aten._to_copy.default(aten.ne.Scalar(indices, padding_idx), dtype=grad.dtype)
        scale = keep if scale is None else aten.mul.Tensor(scale, keep)
    if scale is not None:
        rows = aten.mul.Tensor(rows, aten.unsqueeze.default(scale, 1))
    zeros = torch.zeros([num_weights, grad.shape[1]], dtype=grad.dtype, device=dev)
    return aten.index_put.default(zeros, [indices], rows, True)


def _max_backward(grad, bag_size, maximum_indices, num_weights):
    """The weight gradient of max bags, as ATen's
    ``_embedding_bag_dense_backward_cpu_max``: each column's gradient goes to
    the row its max came from (``maximum_indices``), accumulated; empty bags
    (``bag_size`` 0, index 0) give none."""
    bags, cols = grad.shape
    if tuple(maximum_indices.shape) != (bags, cols) or bag_size.shape[0] < bags:
        return NotImplemented
    used = aten.unsqueeze.default(aten.gt.Scalar(aten.slice.Tensor(bag_size, 0, 0, bags), 0), 1)
    g = aten.where.self(used, grad, aten.zeros_like.default(grad))
    col = aten.expand.default(aten.unsqueeze.default(
        aten.arange.default(cols, dtype=torch.int64, device=grad.device), 0), [bags, cols])
    zeros = aten.zeros.default([num_weights, cols], dtype=grad.dtype, device=grad.device)
    return aten.index_put.default(zeros, [aten.reshape.default(maximum_indices, [-1]),
                                          aten.reshape.default(col, [-1])],
                                  aten.reshape.default(g, [-1]), True)
