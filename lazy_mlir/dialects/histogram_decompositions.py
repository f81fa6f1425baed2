"""``histc`` as ATen's CPU kernel computes it (``ATen/native/Histogram.cpp``,
``ATen/native/cpu/HistogramKernel.cpp``), with the bin count static.

The outer edges: ``min``/``max`` rounded to the input dtype; when they are
equal (the default 0, 0) and the input is not empty, the input's own min and
max, computed in the graph; equal edges are then widened by 1 on each side.
An element ``x`` in ``[lo, hi]`` (NaN and elements outside skipped) falls in
bin ``int64((x - lo) * bins / (hi - lo))``, each operation rounded in the
input dtype as in the kernel's ``LINEAR_INTERPOLATION`` (no search among the
edges), the last bin keeping its right edge. Counts are exact (integers,
converted to the dtype at the end, as the kernel's float additions of 1 are
below 2**24).

Differences from eager, each by construction, not rounding:

- eager raises when the data range is not finite (the input has NaN or
  infinities and ``min == max``); a graph cannot raise, so every bin is NaN;
- a range given as ``min > max``, or a non-finite one, raises in eager: not
  decomposed (falls back and raises there).

Only float32/float64, and a bounded (elements x bins) one-hot comparison.
"""
from __future__ import annotations

import math
import struct

import torch

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float64)
_MAX_ONE_HOT = 1 << 24


def _round_to(v: float, dtype) -> float | None:
    """``v`` as ``Scalar.to<scalar_t>()`` rounds it (None: overflows)."""
    if dtype == torch.float64:
        return float(v)
    try:
        return struct.unpack("f", struct.pack("f", float(v)))[0]
    except OverflowError:
        return None


def _bin_counts(x, lo, hi, bins: int, weight=None):
    """Counts (or weight sums) of the 1-d ``x`` in ``bins`` equal bins over
    ``[lo, hi]`` (0-d tensors of x's dtype), the kernel's linear mapping."""
    valid = aten.logical_and.default(aten.ge.Tensor(x, lo), aten.le.Tensor(x, hi))
    scaled = aten.div.Tensor(aten.mul.Scalar(aten.sub.Tensor(x, lo), float(bins)),
                             aten.sub.Tensor(hi, lo))
    # NaN / out-of-range elements get a bin too, masked out below
    safe = aten.where.self(valid, scaled, torch.zeros((), dtype=x.dtype, device=x.device))
    pos = aten._to_copy.default(safe, dtype=torch.int64)  # truncation, as static_cast
    pos = aten.clamp_max.default(pos, bins - 1)  # the last bin includes its right edge
    edges = aten.arange.default(bins, dtype=torch.int64, device=x.device)
    hot = aten.logical_and.default(aten.eq.Tensor(aten.unsqueeze.default(pos, 1), edges),
                                   aten.unsqueeze.default(valid, 1))
    if weight is None:
        counts = aten.sum.dim_IntList(aten._to_copy.default(hot, dtype=torch.int64), [0])
        return aten._to_copy.default(counts, dtype=x.dtype)
    zero = torch.zeros((), dtype=weight.dtype, device=x.device)
    return aten.sum.dim_IntList(aten.where.self(hot, aten.unsqueeze.default(weight, 1), zero), [0])


def histc(x, bins=100, min=0, max=0):
    """``torch.histc`` (module docstring)."""
    if x.dtype not in _FLOATS or not isinstance(bins, int) or bins <= 0:
        return NotImplemented
    if x.numel() * bins > _MAX_ONE_HOT or (bins + 1) % 16 == 0:
        # (bins + 1) % 16: ATen's vectorised linspace may round the last edge
        # off ``max``, and the kernel bins against that edge.
        return NotImplemented
    lo_d, hi_d = float(min), float(max)
    flat = aten.reshape.default(x, [-1])
    if lo_d != hi_d or x.numel() == 0:
        if lo_d == hi_d:
            lo_d, hi_d = lo_d - 1, hi_d + 1
        if not (math.isfinite(lo_d) and math.isfinite(hi_d)) or not lo_d < hi_d:
            return NotImplemented  # eager raises
        lo_f, hi_f = _round_to(lo_d, x.dtype), _round_to(hi_d, x.dtype)
        if lo_f is None or hi_f is None:
            return NotImplemented
        if x.numel() == 0:
            return torch.zeros([bins], dtype=x.dtype, device=x.device)
        lo = torch.full((), lo_f, dtype=x.dtype, device=x.device)
        hi = torch.full((), hi_f, dtype=x.dtype, device=x.device)
        return _bin_counts(flat, lo, hi, bins)
    # The data's range, computed in the graph; NaN explicitly (a compiled
    # min/max may drop it) so the range is non-finite as in eager.
    any_nan = aten.any.default(aten.isnan.default(flat))
    lo = aten.amin.default(flat, [0])
    hi = aten.amax.default(flat, [0])
    same = aten.eq.Tensor(lo, hi)
    lo = aten.where.self(same, aten.sub.Scalar(lo, 1), lo)
    hi = aten.where.self(same, aten.add.Scalar(hi, 1), hi)
    out = _bin_counts(flat, lo, hi, bins)
    finite = aten.logical_and.default(aten.isfinite.default(lo), aten.isfinite.default(hi))
    ok = aten.logical_and.default(finite, aten.logical_not.default(any_nan))
    nan = torch.full((), math.nan, dtype=x.dtype, device=x.device)
    return aten.where.self(ok, out, nan)


HISTOGRAM_DECOMPOSITIONS = {
    aten.histc.default: histc,
}
