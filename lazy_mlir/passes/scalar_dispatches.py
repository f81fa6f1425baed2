"""Scalar operations are cut into dispatches of a bounded number of buffers
(a linalg-stage pass, every target).

IREE 3.13 puts operations on one-element tensors into dispatches of their
own (``FormScalarDispatches``), and fuses *independent* ones into the same
dispatch: walking back from the last such operation of a function, every
earlier one is taken unless a value it makes was used by an operation that
was not (a "horizontal" fusion of any length). Each result used outside
becomes a writable binding of that dispatch, and IREE does not fuse writable
bindings (``--iree-stream-resource-alias-mutable-bindings`` is off). The
runtime takes at most 32 bindings per dispatch, so a module with more cannot
be loaded: ``hal/module.c:1106 OUT_OF_RANGE`` (the whole graph then ran
eagerly). ``clip_grad_norm_`` makes one: a norm per gradient, each ``sqrt``
of a sum of squares on a 0-d tensor, then ``stack``. A tiny 2-layer BERT has
41 gradients, so 41 ``sqrt``s in one dispatch with 42 bindings.

Here the scalar operations of each function body are taken in order into
runs of at most ``MAX_BINDINGS`` estimated bindings (each value read from
outside the run, each result); at the end of a run, each value it made that
is used later passes through a ``linalg_edit.FUSION_BARRIER`` placed right
after the run. IREE's walk then stops there (the barrier is not a compute
operation, so the run's last operation is "used by one not taken"), and no
later dispatch takes the run's operations as producers. A later reshape of
such a value (``stack``'s ``expand_shape`` of each 0-d norm) moves up to the
barrier's place and is barriered instead: IREE moves a reshape of a
barrier's result above the barrier, which would carry the barrier down to
the ``stack``, past the run that follows. The barrier is erased once the
dispatches are formed; no value changes. (The 40 norms of
``tests/e2e/test_scalar_dispatches.py``: 5 scalar dispatches of 8 instead
of one of 40.)
"""
from __future__ import annotations

import re

from ..dialects import linalg_edit as E

MAX_BINDINGS = 16
"""Bindings of a run, estimated high: half the runtime's 32 (other targets
limit buffers or push constants to the same order: lavapipe 32 storage
buffers, 128 bytes of push constants)."""

# Tensor ops IREE does not treat as compute, and ops it clones into each
# dispatch that uses them (``isClonableIntoDispatchOp``): in no scalar
# dispatch, and no binding of one.
_NOT_COMPUTE = {"tensor.cast", "tensor.collapse_shape", "tensor.empty", "tensor.expand_shape",
                "linalg.pack", "linalg.unpack", "linalg.fill", "tensor.extract",
                "tensor.extract_slice"}
_CLONED = {"tensor.empty", "linalg.fill", "arith.constant", "tensor.extract_slice"}


_SCALAR_BARRIER = re.compile(r'"' + re.escape(E.FUSION_BARRIER) + r'"\(%[\w.#]+\) : '
                             r'\(tensor<(?:1x)*[a-z]+[0-9]*>\)')


def _is_scalar(op) -> bool:
    """Whether IREE would put ``op`` in a scalar dispatch (linalg or tensor,
    every operand and result of one element)."""
    name = op.name
    if not name.startswith(("linalg.", "tensor.")) or name in _NOT_COMPUTE:
        return False
    values = list(op.operands) + list(op.results)
    return bool(op.results) and all(E.elements(v) == 1 for v in values)


def _bindings(op, made: set, read: set) -> int:
    """The bindings ``op`` adds to a run that made ``made`` and reads
    ``read`` from outside (updated): its other operands (not cloned into
    the dispatch) and its results."""
    before = len(read)
    for v in op.operands:
        producer = E.producer(v)
        if v not in made and (producer is None or producer.name not in _CLONED):
            read.add(v)
    return len(read) - before + len(op.results)


def bound_scalar_dispatches(module) -> int:
    """Cut the scalar operations of each function into runs of at most
    ``MAX_BINDINGS`` estimated bindings; returns the number of cuts."""
    cuts = 0
    for body in E.function_bodies(module):
        run, made, read, bindings = [], set(), set(), 0
        for op in body:
            if not _is_scalar(op):
                continue
            need = _bindings(op, made, set(read))
            if run and bindings + need > MAX_BINDINGS:
                cuts += _cut(run)
                run, made, read, bindings = [], set(), set(), 0
            bindings += _bindings(op, made, read)
            run.append(op)
            made.update(op.results)
    return cuts


def _cut(run: list) -> int:
    """Barriers after ``run``'s last operation on the later uses of its values."""
    last = run[-1]
    cut = False
    for op in run:
        for r in op.results:
            cut |= E.barrier_uses_after(r, last)
    return int(cut)


def count_in(linalg_text: str) -> int:
    """How many one-element values of a printed module pass through a fusion barrier."""
    return len(_SCALAR_BARRIER.findall(linalg_text))
