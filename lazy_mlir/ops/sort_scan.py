"""A stable sort that orders NaN as eager does, and the order statistics
built on it (``median``, ``nanmedian``).

torch-mlir lowers ``sort`` to ``tm_tensor.sort`` (IREE's ``linalg_ext.sort``),
which is not stable and compares with ``<`` only: NaN lands anywhere. Eager's
CPU sort (``ATen/native/cpu/SortingKernel.cpp``) puts NaN last ascending and
first descending, and with ``stable=True`` keeps ties in index order. Here the
compiled sort only ever sees keys that are unique along the sorted dim, so its
order is fully determined:

- bool and integers up to 32 bits: one sort of ``x * n + index`` (``~x``
  descending) in int64;
- float32: one sort of its bits as an order-preserving int32 (``_float32_key``);
- float64 and int64: sort ``key1`` (NaN replaced by infinity, negated for
  descending, ``~x`` for descending int64): tie groups come out contiguous,
  each in some order; then number the groups (``cumsum`` of "differs from
  the previous key") and sort ``(group * 2 + nan_bit) * n + index``, so
  ties end in index order and NaN after (ascending) or before (descending)
  infinity.

The index is read back from the sorted unique key (``key mod n``).

``sort.default`` is replaced before import (``stable_sort``, scope IMPORT);
``sort.stable`` (what ``argsort(stable=...)`` calls) is recorded as
``sort.default`` at capture. A non-stable sort answers the stable order too,
one of the orders eager's unspecified tie order allows.

``median``/``nanmedian`` follow ``median_with_indices_impl`` and
``median_impl`` in ``ATen/native/Sorting.cpp``: their ``nth_element`` runs
with the comparator (value, index) (NaN last for ``nanmedian``), so the answer
is the element at a known position of the stable order: ``(n - 1) // 2``, or
the first NaN for ``median`` when there is one, or ``(n - nans - 1) / 2``
(C division, 0 when all are NaN) for ``nanmedian``.
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, IMPORT, ReentryGuard, register_decomposition

aten = torch.ops.aten

_inside = ReentryGuard()  # set while our own unique-key sorts are traced

_SORTABLE = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
             torch.uint8, torch.bool)


def _raw_sort(key, dim):
    """The compiled sort of keys unique along ``dim`` (no re-decomposition)."""
    with _inside:
        return aten.sort.default(key, dim)


def _shape_along(n, dim, ndim):
    return [n if d == dim else 1 for d in range(ndim)]


@register_decomposition(aten.sort.default, scope=IMPORT)
def stable_sort(x, dim=-1, descending=False):
    """``(values, indices)`` of eager's stable CPU sort of ``x`` along ``dim``
    (module docstring): ties in index order, NaN last ascending and first
    descending, -0.0 and 0.0 equal (kept in index order, signs kept)."""
    if _inside.active or x.dtype not in _SORTABLE:
        return NotImplemented
    if x.dim() == 0:
        return aten.clone.default(x), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if n <= 1 or x.numel() == 0:
        idx = torch.zeros(x.shape, dtype=torch.int64, device=x.device)
        return aten.clone.default(x), idx
    if not x.dtype.is_floating_point and x.itemsize < 8:
        # bool and integers up to 32 bits: one sort of x * n + i
        pos = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
        pos = aten.view.default(pos, _shape_along(n, dim, x.dim()))
        wide = aten._to_copy.default(x, dtype=torch.int64)
        if descending:
            wide = aten.bitwise_not.default(wide)
        key = aten.add.Tensor(aten.mul.Scalar(wide, n), pos)
        return _by_unique_key(x, key, n, dim)
    if x.dtype == torch.float32:
        return _by_unique_key(x, _float32_key(x, n, dim, descending), n, dim)
    floating = x.dtype.is_floating_point
    if floating:
        nan = aten.isnan.default(x)
        inf = torch.full((), float("inf"), dtype=x.dtype, device=x.device)
        key1 = aten.neg.default(x) if descending else x
        key1 = aten.where.self(nan, aten.neg.default(inf) if descending else inf, key1)
    else:
        key1 = aten.bitwise_not.default(x) if descending else x
    s1, p1 = _raw_sort(key1, dim)
    # Group number of each sorted position: keys equal to the previous one
    # (ties; -0.0 == 0.0) share it. Written with slices, not a shift op.
    first = aten.slice.Tensor(s1, dim, 0, n - 1)
    rest = aten.slice.Tensor(s1, dim, 1, n)
    step = aten._to_copy.default(aten.ne.Tensor(rest, first), dtype=torch.int64)
    zero = torch.zeros([1 if d == dim else s for d, s in enumerate(x.shape)], dtype=torch.int64,
                       device=x.device)
    group = aten.cumsum.default(aten.cat.default([zero, step], dim), dim)
    if floating:
        # Within the group of +inf keys, NaN after inf ascending (the NaN
        # key is the smallest descending, where it goes before -x = -inf).
        sub = aten._to_copy.default(aten.gather.default(nan, dim, p1), dtype=torch.int64)
        if descending:
            sub = aten.rsub.Scalar(sub, 1)
        group = aten.add.Tensor(aten.mul.Scalar(group, 2), sub)
    return _by_unique_key(x, aten.add.Tensor(aten.mul.Scalar(group, n), p1), n, dim)


def _float32_key(x, n, dim, descending):
    """``rank * n + index`` of float32 ``x`` for one sort: its bits as an
    int32 that orders as the float (the 31 low bits of negatives flipped),
    -0.0 as 0.0, NaN just above +inf. One sort whose index operand nothing
    reads: the two-sort form read its first sort's indices, and two sorts of
    one shape in one module then shared that operand, which a module with
    dynamic dimensions cannot take apart (``generate()``'s top-p sampling
    compiled one module per token)."""
    x = aten.where.ScalarSelf(aten.eq.Scalar(x, 0), 0.0, x)
    bits = aten.view.dtype(x, torch.int32)
    ordered = aten.where.self(aten.lt.Scalar(bits, 0), aten.bitwise_xor.Scalar(bits, 0x7FFFFFFF),
                              bits)
    ordered = aten.where.ScalarSelf(aten.isnan.default(x), 0x7F800001, ordered)
    if descending:
        ordered = aten.bitwise_not.default(ordered)
    pos = aten.view.default(aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device),
                            _shape_along(n, dim, x.dim()))
    return aten.add.Tensor(aten.mul.Scalar(aten._to_copy.default(ordered, dtype=torch.int64), n),
                           pos)


def _by_unique_key(x, key, n, dim):
    """Sort by ``key = rank * n + original_index`` (unique along ``dim``):
    only the sorted keys are read, the index being ``key mod n``. (A sort
    whose index result is read and whose keys are a temporary kept an
    int64 row on the stack: over IREE's 32 KiB limit above 4096 elements.)
    The leading unit dim keeps this sort's index operand from being merged
    by CSE with another sort's of the same shape, which IREE would then
    sort in place twice (``pipeline/in_place.shared_sort_operands``)."""
    keys = aten.squeeze.dim(_raw_sort(aten.unsqueeze.default(key, 0), dim + 1)[0], 0)
    indices = aten.remainder.Scalar(keys, n)
    return aten.gather.default(x, dim, indices), indices


@register_decomposition(aten.sort.stable, scope=CAPTURE)
def sort_stable(x, *, stable=None, dim=-1, descending=False):
    """``sort.stable`` as ``sort.default``, which is stable here (above)."""
    if x.dtype not in _SORTABLE:
        return NotImplemented
    return aten.sort.default(x, dim, descending)


def _nan_count(x, dim, keepdim=True):
    if not x.dtype.is_floating_point:
        return None
    return aten.sum.dim_IntList(aten._to_copy.default(aten.isnan.default(x), dtype=torch.int64),
                                [dim], keepdim)


def _pick(values, indices, k, dim, keepdim):
    """Values and indices at sorted position(s) ``k`` (an int or a tensor
    with size 1 along ``dim``)."""
    if isinstance(k, int):
        k = torch.full(_shape_along(1, dim, values.dim()), k, dtype=torch.int64,
                       device=values.device)
        k = aten.expand.default(k, [1 if d == dim else s for d, s in enumerate(values.shape)])
    v = aten.gather.default(values, dim, k)
    i = aten.gather.default(indices, dim, k)
    if not keepdim:
        v, i = aten.squeeze.dim(v, dim), aten.squeeze.dim(i, dim)
    return v, i


def _median_dim(x, dim, keepdim, ignore_nan):
    if x.dtype not in _SORTABLE or x.dtype == torch.bool or x.numel() == 0:
        return NotImplemented
    if x.dim() == 0:
        return aten.clone.default(x), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    # Recorded as sort.default, made stable before import (stable_sort).
    values, indices = aten.sort.default(x, dim)
    nans = _nan_count(x, dim)
    if nans is None:
        k = (n - 1) // 2
    elif ignore_nan:
        # C's (n - nans - 1) / 2, which is 0 (not -1) when all are NaN.
        k = aten.clamp_min.default(
            aten.floor_divide.default(aten.rsub.Scalar(nans, n - 1), 2), 0)
    else:
        # The first NaN (sorted last, in index order), else the lower middle.
        k = aten.where.self(aten.gt.Scalar(nans, 0), aten.rsub.Scalar(nans, n),
                            torch.full((), (n - 1) // 2, dtype=torch.int64, device=x.device))
    return _pick(values, indices, k, dim, keepdim)


@register_decomposition(aten.median.dim, scope=CAPTURE)
def median_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=False)


@register_decomposition(aten.nanmedian.dim, scope=CAPTURE)
def nanmedian_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=True)


def _median_all(x, ignore_nan):
    if x.dtype not in _SORTABLE or x.dtype == torch.bool or x.numel() == 0:
        return NotImplemented
    flat = aten.reshape.default(x, [-1])
    value = _median_dim(flat, 0, False, ignore_nan)[0]
    if x.dtype.is_floating_point and not ignore_nan:
        # median_impl answers a quiet NaN, not the first NaN of the input.
        nan = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
        value = aten.where.self(aten.gt.Scalar(_nan_count(flat, 0, False), 0), nan, value)
    return value


@register_decomposition(aten.median.default, scope=CAPTURE)
def median(x):
    return _median_all(x, ignore_nan=False)


@register_decomposition(aten.nanmedian.default, scope=CAPTURE)
def nanmedian(x):
    return _median_all(x, ignore_nan=True)


# Replaced before import (``sort.default`` is in the torch dialect).
@register_decomposition(aten.topk.default, scope=IMPORT)
def topk(x, k, dim=-1, largest=True, sorted=True):
    """Floating ``topk`` as the first ``k`` of the stable sort: NaN counts as
    the largest value, as in eager (torch-mlir's topk drops NaN); ties come
    in index order, one of the orders eager may give."""
    if not x.dtype.is_floating_point or x.dim() == 0:
        return NotImplemented
    out = stable_sort(x, dim, descending=largest)
    if out is NotImplemented:
        return out
    values, indices = out
    return (aten.slice.Tensor(values, dim, 0, k), aten.slice.Tensor(indices, dim, 0, k))



# -- cummax, cummin, searchsorted ----------------------------------------------
# ``cummax``/``cummin`` and ``searchsorted``, which the torch dialect lacks,
# in aten ops it has, with eager's exact tie and NaN semantics.
#
# ``cummax``/``cummin`` (ATen's ``cummax_cummin_helper``): walking along
# ``dim``, the running value is replaced when ``x`` is NaN or (the running
# value is not NaN and) ``x >= out`` (``<=`` for cummin). So the value is NaN
# from the first NaN on, and the index is the *last* position reaching the
# running value (or the last NaN so far). Both are prefix scans, written as
# ``ceil(log2 n)`` shift-and-combine steps (Hillis-Steele):
#
# - ``m``: prefix max (min) of ``x`` with NaN left out;
# - ``c_j``: ``x_j`` is NaN, or equals ``m_j`` before any NaN. The last ``c``
#   position up to ``i`` is the answer's index: before the first NaN the
#   prefix value ``m_i`` is reached at some ``j <= i`` where ``c_j`` holds, and
#   every later ``c`` position has ``m`` equal to it (``m`` is monotone and
#   ``x_j <= m_j``); after a NaN only NaN positions have ``c``.
#
# ``searchsorted`` runs ATen's own bisection (``cus_lower_bound`` /
# ``cus_upper_bound`` in ``ATen/native/Bucketization.cpp``) for every value at
# once, ``bit_length(n)`` steps of a gather and a compare, so it answers as
# eager even for sequences that are not sorted or hold NaN.

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


@register_decomposition(aten.cummax.default, scope=CAPTURE)
def cummax(x, dim):
    return _cumextreme(x, dim, largest=True)


@register_decomposition(aten.cummin.default, scope=CAPTURE)
def cummin(x, dim):
    return _cumextreme(x, dim, largest=False)


# Before import: ``isin``'s decomposition there makes ``searchsorted``.
@register_decomposition(aten.searchsorted.Tensor, scope=IMPORT)
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


@register_decomposition(aten.searchsorted.Scalar, scope=IMPORT)
def searchsorted_scalar(sorted_sequence, value, *, out_int32=False, right=False, side=None,
                        sorter=None):
    if sorted_sequence.dim() != 1 or type(value) not in (int, float):
        return NotImplemented
    # ATen makes the scalar a tensor of its own type (int64 or float64).
    v = torch.full((), value, dtype=torch.int64 if type(value) is int else torch.float64,
                   device=sorted_sequence.device)
    return searchsorted(sorted_sequence, v, out_int32=out_int32, right=right, side=side,
                        sorter=sorter)


@register_decomposition(aten.bucketize.Tensor, scope=IMPORT)
def bucketize(x, boundaries, *, out_int32=False, right=False):
    """``searchsorted(boundaries, x)`` (ATen's ``bucketize_out_cpu``);
    replaces torch-mlir's lowering, which answered ``len(boundaries)`` for
    every value when the boundaries end in NaN."""
    if boundaries.dim() != 1:
        return NotImplemented
    return searchsorted(boundaries, x, out_int32=out_int32, right=right)



# -- mode ----------------------------------------------------------------------
# ``mode`` as ATen's CPU kernel (``mode_kernel_impl`` in
# ``ATen/native/cpu/TensorCompareKernel.cpp``) on the stable sort of
# the stable sort above.
#
# The kernel sorts each slice by value (``std::sort`` with ``<``), walks the
# runs of equal values (``!=`` ends a run) and keeps the first run longer than
# every run before it: the mode is the smallest of the most frequent values,
# its index the position of the last element of that run in the sorted order.
# Here the sort is stable, so that index is the largest original index among
# the elements equal to the mode; ``std::sort`` is an insertion sort (stable)
# up to 16 elements, so eager agrees there, and above that its unstable
# introsort returns some index of an element equal to the mode (the same
# value: OpInfo's tie rule).
#
# NaN: ``!=`` makes every NaN a run of its own and the stable sort puts them
# last, so NaN is the mode only of an all-NaN slice (index: its first element).
# Eager's ``std::sort`` with ``<`` is not a valid ordering with NaN (a NaN
# compares false both ways and elements cannot move past it), so its runs, and
# its answer, depend on where the NaN sit: it agrees with this one when the NaN
# come last in the slice, and may not otherwise (a value split into two runs by
# a NaN counts less there). This is the one case not matched.
#
# Empty slices fall back (eager raises).

_MODE_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                torch.int8, torch.uint8, torch.bool)


@register_decomposition(aten.mode.default, scope=CAPTURE)
def mode(x, dim=-1, keepdim=False):
    """``(values, indices)`` of ``torch.mode`` (module docstring)."""
    if x.dtype not in _MODE_DTYPES:
        return NotImplemented
    if x.dim() == 0:
        return aten.clone.default(x), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if x.numel() == 0:
        return NotImplemented
    xt = aten.movedim.int(x, dim, -1)
    values, order = aten.sort.stable(xt, stable=True, dim=-1)
    lead = list(values.shape[:-1])
    pos = aten.arange.default(n, dtype=torch.int64, device=x.device)
    true = torch.ones(lead + [1], dtype=torch.bool, device=x.device)
    # ``!=`` of neighbours: a new run starts (NaN != NaN: each NaN its own run)
    differs = aten.ne.Tensor(aten.slice.Tensor(values, -1, 1, n),
                             aten.slice.Tensor(values, -1, 0, n - 1))
    starts = aten.cat.default([true, differs], -1)
    ends = aten.cat.default([differs, true], -1)
    zero = torch.zeros((), dtype=torch.int64, device=x.device)
    run_start = aten.cummax.default(aten.where.self(starts, pos, zero), -1)[0]
    length = aten.where.self(ends, aten.add.Scalar(aten.sub.Tensor(pos, run_start), 1), zero)
    longest = aten.amax.default(length, [-1], True)
    best = aten.logical_and.default(ends, aten.eq.Tensor(length, longest))
    # the first such run (smallest value): the kernel's strict ``>``
    at = aten.amin.default(aten.where.self(best, pos, torch.full((), n, dtype=torch.int64,
                                                                 device=x.device)), [-1], True)
    value = aten.gather.default(values, -1, at)
    index = aten.gather.default(order, -1, at)
    if keepdim:
        return aten.movedim.int(value, -1, dim), aten.movedim.int(index, -1, dim)
    return aten.squeeze.dim(value, -1), aten.squeeze.dim(index, -1)
