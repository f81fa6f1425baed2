"""Integer offsets of views as graph inputs: ``x[i:i+35]`` at any ``i`` is one graph.

A ``slice`` or ``select`` view is read (``capture.apply_view``) and written
back (``views.scatter``) with its start or index a 0-dim int64 graph input
(``ops/offsets.py``), as scalars are lifted (``scalars.py``); what sets a
shape (the dimension, the length after clamping, the step) stays a constant
of the graph's key. The start lifted is the one PyTorch clamped and
normalized, so any start the key admits is in bounds. Every such view is
lifted, a start of 0 too, so that the first batch of an epoch (``i == 0``)
compiles the graph the later ones reuse; a slice of a whole dimension (a
no-op) is not, nor a view under an ``as_strided`` (``liftable``). Each
lifted offset counts ``lifted::int``. On the cpu target only (``lifting``);
``LAZY_MLIR_LIFT_INTS=0`` keeps offsets as constants (one graph per offset,
each with IREE's static offsets).
"""
from __future__ import annotations

import contextlib
import os

import torch

from .. import metrics
from ..config import switched_on
from ..graph.ir import DeviceData, TensorSpec, Value
from ..ops.offsets import ops
from ..targets import get_target
from .state import graph_epoch, lifted_ints, roll_shifts, target

aten = torch.ops.aten
SWITCH = "LAZY_MLIR_LIFT_INTS"
_SLICE, _SELECT, _AS_STRIDED = aten.slice.Tensor, aten.select.int, aten.as_strided.default
_SLICE_DEFAULTS = (0, None, None, 1)  # slice.Tensor's dim, start, end, step


def normalized_start(size: int, start: int | None) -> int:
    """The start PyTorch's ``slice`` uses on a dimension of ``size``: None
    is 0, a negative one counts from the end, then clamped into [0, size]."""
    if start is None:
        return 0
    if start < 0:
        start += size
    return min(max(start, 0), size)


def slice_offset(shape, args, kwargs):
    """(dim, start, length, step) of the slice ``args``/``kwargs``
    (``slice.Tensor``'s after ``self``) of a tensor of ``shape``, the dim
    non-negative and the start clamped and normalized as PyTorch does; None
    where it is not lifted (an empty slice, or the whole dimension)."""
    dim, start, end, step = (list(args) + list(_SLICE_DEFAULTS[len(args):]))[:4]
    if kwargs:
        dim, start, end, step = (kwargs.get("dim", dim), kwargs.get("start", start),
                                 kwargs.get("end", end), kwargs.get("step", step))
    dim %= len(shape)
    size = shape[dim]
    start = normalized_start(size, start)
    end = max(normalized_start(size, size if end is None else end), start)
    length = (end - start + step - 1) // step
    if length == 0 or (length == size and step == 1):
        return None
    return dim, start, length, step


def select_offset(shape, args, kwargs):
    """(dim, index) of the select ``args``/``kwargs`` on ``shape``, both
    non-negative."""
    dim, index = (list(args) + [None, None])[:2]
    if kwargs:
        dim, index = kwargs.get("dim", dim), kwargs.get("index", index)
    dim %= len(shape)
    return dim, index + shape[dim] if index < 0 else index


def lifting() -> bool:
    """Whether offsets are lifted: ``LAZY_MLIR_LIFT_INTS`` is on and the
    target is the CPU. IREE reads a lifted offset on the host
    (``flow.tensor.load``): a read-back from a GPU's memory in the middle of
    the module, and on Vulkan (lavapipe, IREE 3.13) two offsets in one module
    read wrong values. (Decided again only when the switch's text or the
    target changes: every slice read asks.)"""
    if _held[0]:
        return False
    raw, t, decided = os.environ.get(SWITCH), target[0], _decided
    if t is None or raw != decided[0] or t is not decided[1]:
        if t is None:
            t = target[0] = get_target()
        decided[:] = [raw, t, switched_on(SWITCH) and t.name == "cpu"]
    return decided[2]


_decided = [None, None, False]  # (the switch's text, the target, lifting)
_held = [0]  # nesting depth of constant_offsets()


@contextlib.contextmanager
def constant_offsets():
    """Offsets stay constants of the graph inside: ``lm.jit``'s trace, whose
    graph is lowered for any target later and whose offsets could not change
    between calls anyway (they are not its arguments)."""
    _held[0] += 1
    try:
        yield
    finally:
        _held[0] -= 1


def liftable(steps) -> bool:
    """Whether the views of the chain ``steps`` may be lifted: not when an
    ``as_strided`` addresses the storage through them (its offset counts
    from the storage; a lifted view's value has none, and torch-mlir's
    import rewrites an ``as_strided`` through ``slice``s only)."""
    for s in steps:
        if s[0] is _AS_STRIDED:
            return False
    return True


def lifted(x: int) -> Value:
    """0-dim int64 device data holding ``x``: the n-th lifted ``x`` of a
    graph (since the last launch: ``mark_step`` or a read; a loop that never
    calls ``mark_step`` keeps a few, not one a step) is the n-th one kept for
    ``x``, so the data are uploaded once (an offset a loop revisits every
    epoch) and no two offsets of one graph share an input: ``x[i]`` and
    ``y[j]`` are one graph whether or not ``i == j``."""
    metrics.counter_inc("lifted::int")
    if _taken[0] != graph_epoch[0]:  # a new graph
        _taken[0] = graph_epoch[0]
        _taken[1].clear()
    n = _taken[1].get(x, 0)
    _taken[1][x] = n + 1
    kept = lifted_ints.get(x)
    if kept is None:
        if len(lifted_ints) >= 4096:
            lifted_ints.clear()
        kept = lifted_ints[x] = []
    if n >= len(kept):  # (more than ever before; or the table was cleared)
        n = len(kept)
        host = torch.tensor(x, dtype=torch.int64)
        kept.append(Value.of_data(DeviceData(TensorSpec.of(host), host=host)))
    return kept[n]


_taken = [None, {}]  # (the graph epoch, {value: how many lifted in it})


def read(emit, v: Value, op, args, kwargs):
    """The view ``op(v, *args, **kwargs)`` (``op`` a ``slice.Tensor`` or a ``select.int``)
    recorded with its offset lifted, or None (not lifted: record it as it is)."""
    if not lifting():
        return None
    if op is _SELECT:
        dim, index = select_offset(v.spec.shape, args, kwargs)
        return emit(ops.select_at.default, (v, dim, lifted(index)), {})[0]
    found = slice_offset(v.spec.shape, args, kwargs)
    if found is None:
        return None
    dim, start, length, step = found
    return emit(ops.slice_at.default, (v, dim, lifted(start), length, step), {})[0]


def scatter(emit, op, args, kwargs, base: Value, new: Value):
    """``base`` with ``new`` written into its view ``op(base, *args,
    **kwargs)``, recorded with the offset lifted, or None (not lifted)."""
    if (op is not _SLICE and op is not _SELECT) or not lifting():
        return None
    if op is _SELECT:
        dim, index = select_offset(base.spec.shape, args, kwargs)
        return emit(ops.select_scatter_at.default, (base, new, dim, lifted(index)), {})[0]
    found = slice_offset(base.spec.shape, args, kwargs)
    if found is None:
        return None
    dim, start, _, step = found
    return emit(ops.slice_scatter_at.default, (base, new, dim, lifted(start), step), {})[0]


def roll(x, shifts, dims=()):
    """``x.roll(shifts, dims)`` (lazy tensors) with each shift a runtime
    offset, once this roll's shift has varied (``_varied``): the slice of
    ``x`` concatenated with itself that starts at ``n - shift % n`` (``n``
    the dim's size), so a roll by a new amount each step (random shifts of
    an augmentation) is one graph after the first. None where it stays a
    constant: not lifting, a shift that has not varied (a shifted-window
    transformer's: static slices run ~1.4x faster than the concatenation's
    dynamic one), an empty ``x``, or arguments eager refuses (recorded as
    they are, for eager's error)."""
    if not lifting() or x.numel() == 0:
        return None
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    flat = not dims and len(shifts) == 1  # the flattened tensor rolled
    if not flat and (not dims or len(shifts) != len(dims)
                     or not all(-x.dim() <= d < x.dim() for d in dims)):
        return None
    sizes = [x.numel()] if flat else [x.shape[d] for d in dims]
    if not _varied((tuple(x.shape), tuple(dims)), tuple(s % n for s, n in zip(shifts, sizes))):
        return None
    if flat:
        out = _rolled(aten.reshape.default(x, [-1]), shifts, [0])
        return aten.clone.default(aten.view.default(out, list(x.shape)))
    return aten.clone.default(_rolled(x, shifts, dims))


def _rolled(x, shifts, dims):
    """``x`` rolled, as a view of ``x`` concatenated with itself, per dim."""
    for shift, d in zip(shifts, dims):
        n = x.shape[d]
        start = n - shift % n
        x = aten.slice.Tensor(aten.cat.default([x, x], d), d, start, start + n)
    return x


def _varied(site: tuple, shifts: tuple) -> bool:
    """Whether the roll at ``site`` (its shape and dims) that is the n-th
    roll of its graph (since the last launch: a program that reads a loss
    each step but never calls ``mark_step`` counts from one each step too)
    has had another shift at an earlier step (then always):
    a shift seen once stays a constant, as Dynamo's automatic dynamic
    shapes keep a size static until it changes."""
    if _rolls[0] != graph_epoch[0]:  # a new graph
        _rolls[0], _rolls[1] = graph_epoch[0], 0
    _rolls[1] += 1
    key = (_rolls[1], site)
    seen = roll_shifts.get(key, False)
    if seen is False:
        if len(roll_shifts) >= 4096:
            roll_shifts.clear()
        roll_shifts[key] = shifts
        return False
    if seen is not None and seen != shifts:
        roll_shifts[key] = seen = None
    return seen is None


_rolls = [None, 0]  # (the graph epoch, rolls seen in it)
