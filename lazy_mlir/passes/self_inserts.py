"""A slice of a tensor written into that same tensor is copied first (a
linalg-stage pass, every target).

``x[:, 1:] = x[:, :-1].clone()`` (mBART's ``shift_tokens_right``, any
"shift by one") lowers to ``tensor.insert_slice (tensor.extract_slice %x)
into %x``: the clone folds away, so the source is a view of the destination.
IREE 3.13 updates the destination in place and copies the view from the
same buffer while writing it: along an inner dimension the copy runs
forward over elements it already wrote (``[0, 1, 2, 3]`` became
``[0, 0, 0, 0]``, silently: mBART trained on wrong decoder inputs, 0.9% off
eager's loss with dropout off); along the outer one the runtime refuses the
overlapping copy (``source and target ranges must not overlap``). A
``util.optimization_barrier`` on the source makes IREE materialize it in a
buffer of its own first; a ``linalg.copy``, a ``flow.tensor.clone`` or an
``iree_tensor_ext.compute_barrier`` do not (folded or elided: same wrong
values). No value changes; the barrier costs one copy of the slice.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

BARRIER = "util.optimization_barrier"


def copy_self_inserts(module) -> int:
    """Put a ``BARRIER`` on the source of each ``insert_slice`` whose source
    and destination view the same tensor; returns how many."""
    count = 0
    for op in E.ops_named(module, "tensor.insert_slice"):
        source, dest = op.operands[0], op.operands[1]
        if E.producer(source) is not None and E.viewed(source) == E.viewed(dest):
            E.barrier_before(op, 0, BARRIER)
            count += 1
    return count


def count_in(linalg_text: str) -> int:
    """How many slices a printed module passes through a ``BARRIER``."""
    return linalg_text.count(f'"{BARRIER}"') + linalg_text.count(f"{BARRIER} ")
