"""``mode`` as ATen's CPU kernel (``mode_kernel_impl`` in
``ATen/native/cpu/TensorCompareKernel.cpp``) on the stable sort of
``sort_decompositions.py``.

The kernel sorts each slice by value (``std::sort`` with ``<``), walks the
runs of equal values (``!=`` ends a run) and keeps the first run longer than
every run before it: the mode is the smallest of the most frequent values,
its index the position of the last element of that run in the sorted order.
Here the sort is stable, so that index is the largest original index among
the elements equal to the mode; ``std::sort`` is an insertion sort (stable)
up to 16 elements, so eager agrees there, and above that its unstable
introsort returns some index of an element equal to the mode (the same
value: OpInfo's tie rule).

NaN: ``!=`` makes every NaN a run of its own and the stable sort puts them
last, so NaN is the mode only of an all-NaN slice (index: its first element).
Eager's ``std::sort`` with ``<`` is not a valid ordering with NaN (a NaN
compares false both ways and elements cannot move past it), so its runs, and
its answer, depend on where the NaN sit: it agrees with this one when the NaN
come last in the slice, and may not otherwise (a value split into two runs by
a NaN counts less there). This is the one case not matched.

Empty slices fall back (eager raises).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten

_MODE_DTYPES = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                torch.int8, torch.uint8, torch.bool)


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


MODE_DECOMPOSITIONS = {
    aten.mode.default: mode,
}
