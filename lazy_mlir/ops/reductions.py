"""Reductions the compiler lacks or gets wrong.

NaN in arg-reductions (import time): ``argmax``/``argmin`` (and the indices of
``max``/``min`` along a dim) of a float tensor with a NaN give the index of
the first NaN in eager (NaN is treated as the extreme);
torch-mlir's lowering compares with ``>``/``<`` and skips it. The first NaN
is found with an integer argmax of the NaN mask and chosen where a row has
one; the decomposition registered below it (0-d inputs, ``lowering.py``)
runs after. Also here (capture time): ``segment_reduce``, ``histc`` and
``histogram``; ``_is_all_true``/``_is_any_true`` (what ``torch.distributions``
argument checks read: an op of their own the compiler does not know, so
every ``Categorical(probs)`` ran one eagerly) as ``all``/``any``.
"""
from __future__ import annotations

import math
import struct

import torch

from .registry import CAPTURE, IMPORT, ReentryGuard, register_decomposition

aten = torch.ops.aten
_inside = ReentryGuard()


def _nan_aware(op, then):
    def decomposition(x, dim=None, keepdim=False):
        if _inside.active:
            return NotImplemented
        if x.dim() == 0 or not x.dtype.is_floating_point:  # no NaN to find (0-d: index 0)
            return then(x, dim, keepdim) if then is not None else NotImplemented
        with _inside:  # nested calls of the op are traced as they are
            plain = then(x, dim, keepdim) if then is not None else NotImplemented
            if plain is NotImplemented:
                plain = op(x, dim, keepdim)
            nan = aten.isnan.default(x)
            first_nan = aten.argmax.default(aten._to_copy.default(nan, dtype=torch.int32),
                                            dim, keepdim)
            if dim is None:
                any_nan = aten.any.default(nan)
            else:
                any_nan = aten.any.dim(nan, dim, keepdim)
            if isinstance(plain, tuple):  # max.dim / min.dim: (values, indices)
                return plain[0], aten.where.self(any_nan, first_nan, plain[1])
            return aten.where.self(any_nan, first_nan, plain)

    decomposition.__name__ = f"{op.__name__}_nan_first"
    return decomposition


# Chained over the registrations below them (``lowering._on_1d`` for 0-d
# inputs): priority 10, after every plain import-time entry.
for _op in (aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim):
    register_decomposition(_op, scope=IMPORT, priority=10, overrides=True, chained=True)(
        _nan_aware)


# -- segment_reduce ------------------------------------------------------------
# ``segment_reduce`` (``torch._segment_reduce``) with ``lengths`` or
# ``offsets``, as ATen's CPU kernel (``_segment_reduce_lengths_cpu_kernel1``
# in ``ATen/native/SegmentReduce.cpp``) computes it.
#
# The segments come from a tensor (values read in the graph): with lengths,
# segment ``s`` of each outer slice covers ``[cumsum - length, cumsum)``; with
# offsets, ``[offsets[s], offsets[s + 1])``. The number of segments is static.
# Per segment, starting from ``initial`` (else the reduction's identity:
# -inf for max, inf for min, 0 for sum and mean, 1 for prod):
#
# - sum / prod: the sum / product of the elements and the start value;
# - max / min: as ``isnan(v) ? v : std::max(acc, v)``: a NaN element makes the
#   result NaN (``std::max`` keeps a NaN accumulator);
# - mean: the sum over the length; an empty segment gives NaN without
#   ``initial``, ``initial`` with it.
#
# Elements are selected by a (segments x axis length) mask with ``where``, so
# values outside a segment (NaN, infinities) never reach it. Eager raises on
# negative lengths and ``indices``; those and non-float data fall back (values
# are not checked in the graph).

_FLOATS = (torch.float32, torch.float64)
_REDUCES = ("sum", "prod", "max", "min", "mean")
_MAX_MASKED = 1 << 24


@register_decomposition(aten.segment_reduce.default, scope=CAPTURE)
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


# -- histc, histogram ----------------------------------------------------------
# ``histc`` and ``histogram`` as ATen's CPU kernel computes them
# (``ATen/native/Histogram.cpp``, ``ATen/native/cpu/HistogramKernel.cpp``),
# with the bin count static. ``histc`` below; ``histogram`` (edges from a bin
# count, or given as a tensor; weights, density) at ``histogram_bin_ct`` and
# ``histogram_bins_tensor``.
#
# The outer edges: ``min``/``max`` rounded to the input dtype; when they are
# equal (the default 0, 0) and the input is not empty, the input's own min and
# max, computed in the graph; equal edges are then widened by 1 on each side.
# An element ``x`` in ``[lo, hi]`` (NaN and elements outside skipped) falls in
# bin ``int64((x - lo) * bins / (hi - lo))``, each operation rounded in the
# input dtype as in the kernel's ``LINEAR_INTERPOLATION`` (no search among the
# edges), the last bin keeping its right edge. Counts are exact (integers,
# converted to the dtype at the end, as the kernel's float additions of 1 are
# below 2**24).
#
# Differences from eager, each by construction, not rounding:
#
# - eager raises when the data range is not finite (the input has NaN or
#   infinities and ``min == max``); a graph cannot raise, so every bin is NaN;
# - a range given as ``min > max``, or a non-finite one, raises in eager: not
#   decomposed (falls back and raises there).
#
# Float32/float64, and integers as CUDA's kernel bins them (the CPU has no
# integer histc); a bounded (elements x bins) one-hot comparison.

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


_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _histc_integers(x, bins: int, min, max):
    """``histc`` of integers as CUDA's kernel computes it (ATen's CPU kernel
    has none, so a fallback could not run it either; ``transformers``' MoE
    layers count tokens per expert so off the CPU): the bounds truncated to
    integers, equal bounds from the data, widened by 1 if still equal; an
    element in ``[lo, hi]`` falls in bin ``(x - lo) * bins // (hi - lo)``
    (in int64: CUDA's arithmetic in the input dtype may overflow), the last
    bin keeping its right edge. Counts in the input dtype."""
    lo_i, hi_i = int(min), int(max)
    if lo_i > hi_i:
        return NotImplemented  # eager raises
    if x.numel() == 0:
        return torch.zeros([bins], dtype=x.dtype, device=x.device)
    flat = aten._to_copy.default(aten.reshape.default(x, [-1]), dtype=torch.int64)
    if lo_i == hi_i:
        lo, hi = aten.amin.default(flat, [0]), aten.amax.default(flat, [0])
    else:
        lo = torch.full((), lo_i, dtype=torch.int64, device=x.device)
        hi = torch.full((), hi_i, dtype=torch.int64, device=x.device)
    same = aten.eq.Tensor(lo, hi)
    lo = aten.where.self(same, aten.sub.Scalar(lo, 1), lo)
    hi = aten.where.self(same, aten.add.Scalar(hi, 1), hi)
    valid = aten.logical_and.default(aten.ge.Tensor(flat, lo), aten.le.Tensor(flat, hi))
    offset = aten.where.self(valid, aten.sub.Tensor(flat, lo), torch.zeros(
        (), dtype=torch.int64, device=x.device))
    pos = aten.div.Tensor_mode(aten.mul.Scalar(offset, bins), aten.sub.Tensor(hi, lo),
                               rounding_mode="floor")
    pos = aten.clamp_max.default(pos, bins - 1)
    edges = aten.arange.default(bins, dtype=torch.int64, device=x.device)
    hot = aten.logical_and.default(aten.eq.Tensor(aten.unsqueeze.default(pos, 1), edges),
                                   aten.unsqueeze.default(valid, 1))
    counts = aten.sum.dim_IntList(aten._to_copy.default(hot, dtype=torch.int64), [0])
    return aten._to_copy.default(counts, dtype=x.dtype)


@register_decomposition(aten.histc.default, scope=CAPTURE)
def histc(x, bins=100, min=0, max=0):
    """``torch.histc`` (module docstring)."""
    if x.dtype in _INTEGERS and isinstance(bins, int) and 0 < bins and \
            x.numel() * bins <= _MAX_ONE_HOT:
        return _histc_integers(x, bins, min, max)
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


def _host_linspace(lo: float, hi: float, steps: int, dtype) -> list:
    """ATen's own ``linspace`` on the host, outside the trace: its rounding
    (a fused multiply-add, vectorised chunks) is what the edges must be."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with unset_fake_temporarily(), disable_proxy_modes_tracing():
        return torch.linspace(lo, hi, steps, dtype=dtype).tolist()


def _graph_linspace(lo, hi, steps: int):
    """ATen's scalar ``linspace`` loop on 0-d tensors: ``lo + step * i`` for
    the first half, ``hi - step * (steps - 1 - i)`` after, each a fused
    multiply-add (as the CPU build contracts it; emulated in float64, which
    rounds twice: it may differ from the fused result in the last bit in
    rare ties). Only below 16 steps, where ATen does not vectorise."""
    f64 = torch.float64
    step = aten.div.Scalar(aten.sub.Tensor(hi, lo), float(steps - 1))  # in the dtype
    half = steps // 2
    k = torch.tensor([i if i < half else -(steps - 1 - i) for i in range(steps)], dtype=f64,
                     device=lo.device)
    base = aten.where.self(torch.tensor([i < half for i in range(steps)], device=lo.device),
                           aten._to_copy.default(lo, dtype=f64),
                           aten._to_copy.default(hi, dtype=f64))
    out = aten.add.Tensor(base, aten.mul.Tensor(aten._to_copy.default(step, dtype=f64), k))
    return aten._to_copy.default(out, dtype=lo.dtype)


def _searched_bins(x, edges, linear: bool):
    """Each element's bin against sorted ``edges`` (1-d, bins + 1) as the
    kernel finds it, and whether it counts (inside [first, last] edge, not
    NaN). ``linear``: the linear guess refined by ``upper_bound`` over the
    3 edges around it (``LINEAR_INTERPOLATION_WITH_LOCAL_SEARCH``); else
    ``upper_bound`` over all edges (``BINARY_SEARCH``)."""
    nb = edges.shape[0] - 1
    lo = aten.select.int(edges, 0, 0)
    hi = aten.select.int(edges, 0, nb)
    valid = aten.logical_and.default(aten.ge.Tensor(x, lo), aten.le.Tensor(x, hi))
    le = aten.le.Tensor(aten.unsqueeze.default(edges, 0), aten.unsqueeze.default(x, 1))
    ks = aten.arange.default(nb + 1, dtype=torch.int64, device=x.device)
    if linear:
        scaled = aten.div.Tensor(aten.mul.Scalar(aten.sub.Tensor(x, lo), float(nb)),
                                 aten.sub.Tensor(hi, lo))
        safe = aten.where.self(valid, scaled, torch.zeros((), dtype=x.dtype, device=x.device))
        guess = aten._to_copy.default(safe, dtype=torch.int64)
        first = aten.clamp_min.default(aten.sub.Scalar(guess, 1), 0)
        last = aten.clamp_max.default(aten.add.Scalar(guess, 2), nb + 1)
        window = aten.logical_and.default(
            aten.ge.Tensor(aten.unsqueeze.default(ks, 0), aten.unsqueeze.default(first, 1)),
            aten.lt.Tensor(aten.unsqueeze.default(ks, 0), aten.unsqueeze.default(last, 1)))
        le = aten.logical_and.default(le, window)
        base = aten.sub.Scalar(first, 1)
    else:
        base = torch.full((), -1, dtype=torch.int64, device=x.device)
    pos = aten.add.Tensor(base, aten.sum.dim_IntList(aten._to_copy.default(le, dtype=torch.int64),
                                                     [1]))
    return aten.clamp_max.default(pos, nb - 1), valid


def _histogram_counts(x, edges, linear, weight, density):
    nb = edges.shape[0] - 1
    pos, valid = _searched_bins(x, edges, linear)
    ids = aten.arange.default(nb, dtype=torch.int64, device=x.device)
    hot = aten.logical_and.default(aten.eq.Tensor(aten.unsqueeze.default(pos, 1), ids),
                                   aten.unsqueeze.default(valid, 1))
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    if weight is None:
        hist = aten._to_copy.default(aten.sum.dim_IntList(
            aten._to_copy.default(hot, dtype=torch.int64), [0]), dtype=x.dtype)
    else:
        w = aten.reshape.default(weight, [-1, 1])
        hist = aten.sum.dim_IntList(aten.where.self(hot, w, zero), [0])
    if density:
        hist = aten.div.Tensor(hist, aten.sum.default(hist))
        widths = aten.sub.Tensor(aten.slice.Tensor(edges, 0, 1, nb + 1),
                                 aten.slice.Tensor(edges, 0, 0, nb))
        hist = aten.div.Tensor(hist, widths)
    return hist


def _histogram_ok(x, weight):
    return x.dtype in _FLOATS and (weight is None or (weight.dtype == x.dtype
                                                      and weight.numel() == x.numel()))


@register_decomposition(aten.histogram.bin_ct, scope=CAPTURE)
def histogram_bin_ct(x, bins=100, *, range=None, weight=None, density=False):
    """``torch.histogram(x, bins: int)``: ``bins + 1`` linspace edges over
    ``range``, else the data's min and max (equal ends widened by 0.5), else
    [0, 1] for no data; then the kernel's linear guess with a local search.
    A given range takes ATen's own edges (computed on the host); the data's
    range is computed in the graph, for fewer than 15 bins (ATen's scalar
    linspace), with NaN everywhere where eager raises (NaN or infinite data)."""
    if not _histogram_ok(x, weight) or not isinstance(bins, int) or bins <= 0 \
            or x.numel() * (bins + 1) > _MAX_ONE_HOT:
        return NotImplemented
    flat = aten.reshape.default(x, [-1])
    if range is not None or x.numel() == 0:
        lo_d, hi_d = (float(range[0]), float(range[1])) if range is not None else (0.0, 1.0)
        if not (math.isfinite(lo_d) and math.isfinite(hi_d)) or lo_d > hi_d:
            return NotImplemented  # eager raises
        if lo_d == hi_d:
            lo_d, hi_d = lo_d - 0.5, hi_d + 0.5
        edges = torch.tensor(_host_linspace(lo_d, hi_d, bins + 1, x.dtype), dtype=x.dtype,
                             device=x.device)
        if x.numel() == 0:
            hist = torch.zeros([bins], dtype=x.dtype, device=x.device)
            if density:  # 0 / 0
                hist = aten.div.Tensor(hist, aten.sum.default(hist))
            return hist, edges
        return _histogram_counts(flat, edges, True, weight, density), edges
    if bins + 1 >= 16:
        return NotImplemented
    any_nan = aten.any.default(aten.isnan.default(flat))
    lo, hi = aten.amin.default(flat, [0]), aten.amax.default(flat, [0])
    same = aten.eq.Tensor(lo, hi)
    # +-0.5 in double, then rounded to the dtype by linspace
    f64 = torch.float64
    lo = aten._to_copy.default(aten.where.self(same, aten.sub.Scalar(
        aten._to_copy.default(lo, dtype=f64), 0.5), aten._to_copy.default(lo, dtype=f64)),
        dtype=x.dtype)
    hi = aten._to_copy.default(aten.where.self(same, aten.add.Scalar(
        aten._to_copy.default(hi, dtype=f64), 0.5), aten._to_copy.default(hi, dtype=f64)),
        dtype=x.dtype)
    edges = _graph_linspace(lo, hi, bins + 1)
    hist = _histogram_counts(flat, edges, True, weight, density)
    ok = aten.logical_and.default(aten.logical_and.default(
        aten.isfinite.default(lo), aten.isfinite.default(hi)), aten.logical_not.default(any_nan))
    nan = torch.full((), math.nan, dtype=x.dtype, device=x.device)
    return aten.where.self(ok, hist, nan), aten.where.self(ok, edges, nan)


@register_decomposition(aten.histogram.bins_tensor, scope=CAPTURE)
def histogram_bins_tensor(x, bins, *, weight=None, density=False):
    """``torch.histogram(x, bins: Tensor)``: the given edges (copied), each
    element's bin by ``upper_bound`` over all of them (``BINARY_SEARCH``).
    Eager checks the edges are sorted and raises; here unsorted edges give
    some answer."""
    if not _histogram_ok(x, weight) or bins.dtype != x.dtype or bins.dim() != 1 \
            or bins.shape[0] < 2 or x.numel() * bins.shape[0] > _MAX_ONE_HOT:
        return NotImplemented
    edges = aten.clone.default(bins)
    nb = bins.shape[0] - 1
    if x.numel() == 0:
        hist = torch.zeros([nb], dtype=x.dtype, device=x.device)
        if density:
            hist = aten.div.Tensor(hist, aten.sum.default(hist))
        return hist, edges
    flat = aten.reshape.default(x, [-1])
    return _histogram_counts(flat, edges, False, weight, density), edges


@register_decomposition(aten._is_all_true.default, scope=CAPTURE)
def is_all_true(x):
    return aten.all.default(x)


@register_decomposition(aten._is_any_true.default, scope=CAPTURE)
def is_any_true(x):
    return aten.any.default(x)
