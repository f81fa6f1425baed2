"""``cummax``/``cummin`` and ``searchsorted``, which the torch dialect lacks,
in aten ops it has, with eager's exact tie and NaN semantics.

``cummax``/``cummin`` (ATen's ``cummax_cummin_helper``): walking along
``dim``, the running value is replaced when ``x`` is NaN or (the running
value is not NaN and) ``x >= out`` (``<=`` for cummin). So the value is NaN
from the first NaN on, and the index is the *last* position reaching the
running value (or the last NaN so far). Both are prefix scans, written as
``ceil(log2 n)`` shift-and-combine steps (Hillis-Steele):

- ``m``: prefix max (min) of ``x`` with NaN left out;
- ``c_j``: ``x_j`` is NaN, or equals ``m_j`` before any NaN. The last ``c``
  position up to ``i`` is the answer's index: before the first NaN the
  prefix value ``m_i`` is reached at some ``j <= i`` where ``c_j`` holds, and
  every later ``c`` position has ``m`` equal to it (``m`` is monotone and
  ``x_j <= m_j``); after a NaN only NaN positions have ``c``.

``searchsorted`` runs ATen's own bisection (``cus_lower_bound`` /
``cus_upper_bound`` in ``ATen/native/Bucketization.cpp``) for every value at
once, ``bit_length(n)`` steps of a gather and a compare, so it answers as
eager even for sequences that are not sorted or hold NaN.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_SCANNABLE = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
              torch.uint8, torch.bool)


def _shift(t, s, dim, fill):
    """``t`` moved ``s`` places forward along ``dim``, ``fill`` shifted in."""
    n = t.shape[dim]
    pad = torch.full([s if d == dim else k for d, k in enumerate(t.shape)], fill,
                     dtype=t.dtype, device=t.device)
    return aten.cat.default([pad, aten.slice.Tensor(t, dim, 0, n - s)], dim)


def _prefix(t, dim, combine, fill):
    """Inclusive prefix scan of ``t`` along ``dim`` with ``combine``."""
    s = 1
    while s < t.shape[dim]:
        t = combine(t, _shift(t, s, dim, fill))
        s *= 2
    return t


def _cumextreme(x, dim, largest):
    if x.dtype not in _SCANNABLE:
        return NotImplemented
    if x.dim() == 0:
        return aten.clone.default(x), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if x.numel() == 0 or n == 1:
        return aten.clone.default(x), torch.zeros(x.shape, dtype=torch.int64, device=x.device)
    src = aten._to_copy.default(x, dtype=torch.int32) if x.dtype == torch.bool else x
    combine = aten.maximum.default if largest else aten.minimum.default
    if src.dtype.is_floating_point:
        fill = float("-inf") if largest else float("inf")
        nan = aten.isnan.default(src)
        # NaN kept out of the scan (a compiled maximum may drop it either way).
        m = _prefix(aten.where.self(nan, torch.full((), fill, dtype=src.dtype,
                                                      device=src.device), src),
                    dim, combine, fill)
        seen = aten.gt.Scalar(aten.cumsum.default(
            aten._to_copy.default(nan, dtype=torch.int32), dim), 0)
        c = aten.logical_or.default(
            nan, aten.logical_and.default(aten.eq.Tensor(src, m), aten.logical_not.default(seen)))
        values = aten.where.self(seen, torch.full((), float("nan"), dtype=src.dtype,
                                                  device=src.device), m)
    else:
        info = torch.iinfo(src.dtype)
        fill = info.min if largest else info.max
        values = _prefix(src, dim, combine, fill)
        c = aten.eq.Tensor(src, values)
    pos = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
    pos = aten.view.default(pos, [n if d == dim else 1 for d in range(x.dim())])
    last = aten.where.self(c, pos, torch.full((), -1, dtype=torch.int64, device=x.device))
    indices = _prefix(last, dim, aten.maximum.default, -1)
    if x.dtype == torch.bool:
        values = aten.ne.Scalar(values, 0)
    return values, indices


def cummax(x, dim):
    return _cumextreme(x, dim, largest=True)


def cummin(x, dim):
    return _cumextreme(x, dim, largest=False)


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None,
                 sorter=None):
    """ATen's bisection, vectorized: ``start``/``end`` per value, each step
    halving every still-open interval (closed ones are left as they are)."""
    seq = sorted_sequence
    if not isinstance(values, torch.Tensor) or seq.dim() == 0:
        return NotImplemented
    common = torch.promote_types(seq.dtype, values.dtype)  # as ATen compares them
    if common not in _SCANNABLE or common == torch.bool:
        return NotImplemented
    seq = aten._to_copy.default(seq, dtype=common) if seq.dtype != common else seq
    values = aten._to_copy.default(values, dtype=common) if values.dtype != common else values
    right = side == "right" if side is not None else right
    out_dtype = torch.int32 if out_int32 else torch.int64
    n = seq.shape[-1]
    one_d = seq.dim() == 1
    if not one_d and (values.dim() != seq.dim() or values.shape[:-1] != seq.shape[:-1]):
        return NotImplemented
    if n == 0 or values.numel() == 0:
        return torch.zeros(values.shape, dtype=out_dtype, device=values.device)
    if sorter is not None:
        seq = aten.gather.default(seq, -1, sorter)
    start = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    end = torch.full(values.shape, n, dtype=torch.int64, device=values.device)
    for _ in range(n.bit_length()):
        open_ = aten.lt.Tensor(start, end)
        mid = aten.add.Tensor(start, aten.floor_divide.default(aten.sub.Tensor(end, start), 2))
        safe = aten.clamp_max.default(mid, n - 1)  # closed intervals may point at n
        at_mid = aten.index.Tensor(seq, [safe]) if one_d else aten.gather.default(seq, -1, safe)
        # lower bound: go right while !(mid >= v); upper bound: while !(mid > v).
        ge = aten.gt.Tensor(at_mid, values) if right else aten.ge.Tensor(at_mid, values)
        go_right = aten.logical_and.default(open_, aten.logical_not.default(ge))
        go_left = aten.logical_and.default(open_, ge)
        start = aten.where.self(go_right, aten.add.Scalar(mid, 1), start)
        end = aten.where.self(go_left, mid, end)
    return aten._to_copy.default(start, dtype=out_dtype)


def searchsorted_scalar(sorted_sequence, value, *, out_int32=False, right=False, side=None,
                        sorter=None):
    if sorted_sequence.dim() != 1 or type(value) not in (int, float):
        return NotImplemented
    # ATen makes the scalar a tensor of its own type (int64 or float64).
    v = torch.full((), value, dtype=torch.int64 if type(value) is int else torch.float64,
                   device=sorted_sequence.device)
    return searchsorted(sorted_sequence, v, out_int32=out_int32, right=right, side=side,
                        sorter=sorter)


def bucketize(x, boundaries, *, out_int32=False, right=False):
    """``searchsorted(boundaries, x)`` (ATen's ``bucketize_out_cpu``);
    replaces torch-mlir's lowering, which answered ``len(boundaries)`` for
    every value when the boundaries end in NaN."""
    if boundaries.dim() != 1:
        return NotImplemented
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)


SCAN_DECOMPOSITIONS = {
    aten.cummax.default: cummax,
    aten.cummin.default: cummin,
}

# Before import: ``isin``'s decomposition there makes ``searchsorted``.
SCAN_IMPORT_DECOMPOSITIONS = {
    aten.searchsorted.Tensor: searchsorted,
    aten.searchsorted.Scalar: searchsorted_scalar,
    aten.bucketize.Tensor: bucketize,
}
