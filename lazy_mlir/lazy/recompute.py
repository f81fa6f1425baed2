"""Activation checkpointing that saves memory: the recompute is tied to the backward.

``torch.utils.checkpoint`` drops a segment's activations in the forward and
runs the segment again during the backward. On the lazy device forward and
backward are one graph, so the recomputed ops read the same values as the
forward's and the compiler merges them (CSE): the forward's activations stay
live until the backward, as without checkpointing. PyTorch/XLA ties the
recompute's inputs to the backward with an optimization barrier; here each
input the recompute reads from before it (a value computed earlier in the
step) is replaced by ``where(isnan(t) & isinf(t), t, x)``, ``t`` one element
of the newest value the backward computed: always ``x`` (no number is both),
but no compiler pass knows that, so the recomputed ops differ from the
forward's (nothing to merge) and cannot run before the backward reaches
them. A where per input, fused by IREE into its consumer or its operand's
packing; IREE's ``util.optimization_barrier`` would instead cut the module
into host-synchronized parts.

The recompute is found by the random state: checkpoint restores the
forward's state (``torch.lazy.set_rng_state``) before it and its own after,
both inside the autograd engine (``preserve_rng_state=True``, the default;
with ``False`` nothing is tied and the memory is not saved). Device data
(parameters, the step's inputs) are not tied: they live through the step
anyway. Each tied input counts ``checkpoint::tied``.
"""
from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_flatten

from .. import metrics
from ..graph import ir
from .kinds import written_args

aten = torch.ops.aten


class _Window:
    """One recompute: its graph task, the token's condition and casts, the
    inputs tied so far, and the storages' values the recompute made."""

    def __init__(self, task: int):
        self.task = task
        self.token = None  # (the condition, {dtype: the token cast}), on first use
        self.tied: dict[int, tuple] = {}  # id(value) -> (value, its tied value)
        self.made: dict[int, object] = {}  # id(value) -> value (held: ids stay unique)


_open: list = [None]


def on_set_rng_state() -> None:
    """``torch.lazy.set_rng_state`` was called: inside the autograd engine
    the first call opens a recompute (the forward's state restored), the
    next one closes it (``fork_rng`` restores the backward's)."""
    task = torch._C._current_graph_task_id()
    if task == -1:
        return
    w = _open[0]
    _open[0] = _Window(task) if w is None or w.task != task else None


def active() -> bool:
    w = _open[0]
    if w is None:
        return False
    if w.task != torch._C._current_graph_task_id():  # the backward ended inside it
        _open[0] = None
        return False
    return True


def tie_inputs(func, args, kwargs, emit, value_of, wrap_value, lazy_type):
    """``args``/``kwargs`` with every lazy tensor ``func`` reads (not writes)
    that holds a value computed before the recompute replaced by a tied copy."""
    w = _open[0]
    written = _written(func)
    args = [_tied_arg(w, a, emit, value_of, wrap_value, lazy_type)
            if type(a) is lazy_type and not (i < len(written) and written[i]) else a
            for i, a in enumerate(args)]
    return args, kwargs


def note_made(result, written_tensors=()) -> None:
    """The values of ``result``'s lazy tensors (and of the tensors the op
    wrote) are the recompute's own: not tied when it reads them again."""
    w = _open[0]
    if w is None:
        return
    leaves, _ = tree_flatten(result)
    for t in (*leaves, *written_tensors):
        storage = getattr(t, "_storage", None)
        if storage is not None:
            w.made[id(storage.value)] = storage.value


def _tied_arg(w: _Window, a, emit, value_of, wrap_value, lazy_type):
    base = a._storage.value
    if id(base) in w.made or base.data is not None or base.node is None:
        return a
    v = value_of(a)
    hit = w.tied.get(id(v))
    if hit is None:
        token = _token(w, emit, v.spec.dtype)
        if token is None:
            return a
        cond, cast = token
        hit = w.tied[id(v)] = (v, emit(aten.where.self, (cond, cast, v), {})[0])
        metrics.counter_inc("checkpoint::tied")
    return wrap_value(hit[1])


def _token(w: _Window, emit, dtype: torch.dtype):
    """(the always-false condition, the token cast to ``dtype``), or None
    when no value was computed before the recompute to tie to."""
    if w.token is None:
        node = ir.newest[0]
        outs = [] if node is None else [o for o in node.outputs if math.prod(o.spec.shape) > 0]
        if not outs:
            return None
        t = outs[0]
        for _ in t.spec.shape:  # one element: its first
            t = emit(aten.select.int, (t, 0, 0), {})[0]
        t = emit(aten._to_copy.default, (t,), {"dtype": torch.float32})[0]
        cond = emit(aten.logical_and.default, (emit(aten.isnan.default, (t,), {})[0],
                                               emit(aten.isinf.default, (t,), {})[0]), {})[0]
        w.token = (cond, {torch.float32: t})
    cond, casts = w.token
    if dtype not in casts:
        casts[dtype] = emit(aten._to_copy.default, (casts[torch.float32],), {"dtype": dtype})[0]
    return cond, casts[dtype]


_WRITTEN: dict = {}


def _written(func) -> tuple[bool, ...]:
    """Per positional argument of ``func``: whether it writes it."""
    found = _WRITTEN.get(func)
    if found is None:
        names = set(written_args(func)) if hasattr(func, "_schema") else set()
        schema_args = func._schema.arguments if hasattr(func, "_schema") else ()
        found = _WRITTEN[func] = tuple(a.name in names for a in schema_args)
    return found
