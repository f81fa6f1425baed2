"""``segment_reduce`` (``torch._segment_reduce``) with ``lengths`` or
``offsets``, as ATen's CPU kernel (``_segment_reduce_lengths_cpu_kernel1``
in ``ATen/native/SegmentReduce.cpp``) computes it.

The segments come from a tensor (values read in the graph): with lengths,
segment ``s`` of each outer slice covers ``[cumsum - length, cumsum)``; with
offsets, ``[offsets[s], offsets[s + 1])``. The number of segments is static.
Per segment, starting from ``initial`` (else the reduction's identity:
-inf for max, inf for min, 0 for sum and mean, 1 for prod):

- sum / prod: the sum / product of the elements and the start value;
- max / min: as ``isnan(v) ? v : std::max(acc, v)``: a NaN element makes the
  result NaN (``std::max`` keeps a NaN accumulator);
- mean: the sum over the length; an empty segment gives NaN without
  ``initial``, ``initial`` with it.

Elements are selected by a (segments x axis length) mask with ``where``, so
values outside a segment (NaN, infinities) never reach it. Eager raises on
negative lengths and ``indices``; those and non-float data fall back (values
are not checked in the graph).
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float64)
_REDUCES = ("sum", "prod", "max", "min", "mean")
_MAX_MASKED = 1 << 24


def segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                   unsafe=False, initial=None):
    """``segment_reduce`` (module docstring)."""
    if data.dtype not in _FLOATS or reduce not in _REDUCES or indices is not None \
            or (lengths is None) == (offsets is None) or data.dim() == 0:
        return NotImplemented
    seg = lengths if lengths is not None else offsets
    axis = axis % data.dim()
    if seg.dtype not in (torch.int64, torch.int32) or seg.dim() != axis + 1 \
            or list(seg.shape[:axis]) != list(data.shape[:axis]):
        return NotImplemented
    if initial is not None:
        initial = float(initial)
        if math.isnan(initial):
            return NotImplemented
    count = seg.shape[axis] - (1 if offsets is not None else 0)
    length = data.shape[axis]
    inner = list(data.shape[axis + 1:])
    if count < 0 or data.numel() * max(count, 1) > _MAX_MASKED:
        return NotImplemented
    dev, dt = data.device, data.dtype
    seg = aten._to_copy.default(seg, dtype=torch.int64)
    if lengths is not None:
        ends = aten.cumsum.default(seg, axis)
        starts = aten.sub.Tensor(ends, seg)
        sizes = seg
    else:
        starts = aten.slice.Tensor(seg, axis, 0, count)
        ends = aten.slice.Tensor(seg, axis, 1, count + 1)
        sizes = aten.sub.Tensor(ends, starts)
    pos = aten.arange.default(length, dtype=torch.int64, device=dev)
    # mask: outer + [count, length] + [1] * len(inner)
    inside = aten.logical_and.default(
        aten.le.Tensor(aten.unsqueeze.default(starts, -1), pos),
        aten.lt.Tensor(pos, aten.unsqueeze.default(ends, -1)))
    mask = aten.view.default(inside, list(inside.shape) + [1] * len(inner))
    vals = aten.unsqueeze.default(data, axis)                # outer + [1, length] + inner
    red = axis + 1

    def full(v):
        return torch.full((), v, dtype=dt, device=dev)

    if reduce in ("sum", "mean"):
        out = aten.sum.dim_IntList(aten.where.self(mask, vals, full(0.0)), [red])
        if initial is not None:
            out = aten.add.Scalar(out, initial)
    elif reduce == "prod":
        out = aten.prod.dim_int(aten.where.self(mask, vals, full(1.0)), red)
        if initial is not None:
            out = aten.mul.Scalar(out, initial)
    else:
        largest = reduce == "max"
        fill = -math.inf if largest else math.inf
        # NaN explicitly: a compiled max/min may drop it
        picked = aten.where.self(mask, vals, full(fill))
        nan = aten.isnan.default(picked)
        picked = aten.where.self(nan, full(fill), picked)
        out = (aten.amax if largest else aten.amin).default(picked, [red])
        if initial is not None:
            bound = full(initial)
            out = (aten.maximum if largest else aten.minimum).default(out, bound)
        out = aten.where.self(aten.any.dim(nan, red), full(math.nan), out)
    if reduce == "mean":
        n = aten.view.default(sizes, list(sizes.shape) + [1] * len(inner))
        divided = aten.div.Tensor(out, aten._to_copy.default(n, dtype=dt))
        empty = aten.eq.Scalar(n, 0)
        out = aten.where.self(empty, full(initial if initial is not None else math.nan), divided)
    return out


SEGMENT_DECOMPOSITIONS = {
    aten.segment_reduce.default: segment_reduce,
}
