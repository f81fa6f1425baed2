"""Unit dimensions are inserted before a one-element slice, not after it (a
linalg-stage pass, every target).

A one-element slice given unit dimensions (``torch.stack([y[i:i+1],
y[j:j+1]])``, ``y[i].unsqueeze(0)``, ``x.split(1)[1].view(1, -1)``) lowers to a
``tensor.expand_shape`` of a one-element ``tensor.extract_slice``. IREE
3.13's ``BubbleUpExpandShapesPass`` moves the expansion through the slice
and, where every size is 1, builds a slice of a higher rank than its source,
which fails to verify ("expected rank to be smaller or equal to the other
rank"): the graph ran eagerly (fuzzer seeds 960551 on the lazy device, where
the offsets are runtime values; 902529, 940189, 940199 under
``torch.compile``). Slices of more than one element compile. Here the source
is expanded first and the slice taken of it, the order IREE's pattern aims
at, built right: the same value, every dtype, no copy.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

MARK = "lazy_mlir.unit_dims_first"


def unit_dims_before_slices(module) -> int:
    """Rewrite each ``expand_shape`` that only inserts unit dimensions into a
    one-element slice; returns how many."""
    count = 0
    for op in E.ops_named(module, "tensor.expand_shape"):
        if E.one_element_slice(op.operands[0]) is None:
            continue
        sliced = E.expand_before_slice(op)
        if sliced is not None:
            E.mark(sliced, MARK)
            count += 1
    return count
