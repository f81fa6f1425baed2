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
- float and int64: sort ``key1`` (NaN replaced by infinity, negated for
  descending, ``~x`` for descending int64): tie groups come out contiguous,
  each in some order; then number the groups (``cumsum`` of "differs from
  the previous key") and sort ``(group * 2 + nan_bit) * n + index``, so
  ties end in index order and NaN after (ascending) or before (descending)
  infinity.

The index is read back from the sorted unique key (``key mod n``).

``sort.default`` is replaced before import (the entry in ``decompositions.py``);
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

import threading

import torch

aten = torch.ops.aten

_inside = threading.local()  # set while our own unique-key sorts are traced

_SORTABLE = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
             torch.uint8, torch.bool)


def _raw_sort(key, dim):
    """The compiled sort of keys unique along ``dim`` (no re-decomposition)."""
    _inside.on = True
    try:
        return aten.sort.default(key, dim)
    finally:
        _inside.on = False


def _shape_along(n, dim, ndim):
    return [n if d == dim else 1 for d in range(ndim)]


def stable_sort(x, dim=-1, descending=False):
    """``(values, indices)`` of eager's stable CPU sort of ``x`` along ``dim``
    (module docstring): ties in index order, NaN last ascending and first
    descending, -0.0 and 0.0 equal (kept in index order, signs kept)."""
    if getattr(_inside, "on", False) or x.dtype not in _SORTABLE:
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


def _by_unique_key(x, key, n, dim):
    """Sort by ``key = rank * n + original_index`` (unique along ``dim``):
    only the sorted keys are read, the index being ``key mod n``. (A sort
    whose index result is read and whose keys are a temporary kept an
    int64 row on the stack: over IREE's 32 KiB limit above 4096 elements.)
    The leading unit dim keeps this sort's index operand from being merged
    by CSE with another sort's of the same shape, which IREE would then
    sort in place twice (``runtime/modules.shared_sort_operands``)."""
    keys = aten.squeeze.dim(_raw_sort(aten.unsqueeze.default(key, 0), dim + 1)[0], 0)
    indices = aten.remainder.Scalar(keys, n)
    return aten.gather.default(x, dim, indices), indices


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


def median_dim(x, dim, keepdim=False):
    return _median_dim(x, dim, keepdim, ignore_nan=False)


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


def median(x):
    return _median_all(x, ignore_nan=False)


def nanmedian(x):
    return _median_all(x, ignore_nan=True)


# Replaced before import (``sort.default`` is in the torch dialect).
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


SORT_IMPORT_DECOMPOSITIONS = {
    aten.sort.default: stable_sort,
    aten.topk.default: topk,
}

# Recorded at capture in terms of ``sort.default``.
SORT_DECOMPOSITIONS = {
    aten.sort.stable: sort_stable,
    aten.median.default: median,
    aten.median.dim: median_dim,
    aten.nanmedian.default: nanmedian,
    aten.nanmedian.dim: nanmedian_dim,
}
