"""A one-element slice at a runtime offset is read as that element (a
linalg-stage pass, every target).

The lazy device lifts slice offsets to graph inputs (``lazy/offsets.py``).
A slice of one element at such an offset, given a unit dimension
(``torch.stack([y[i:i+1], y[j:j+1]])``, ``y[i].unsqueeze(0)``), lowers to
``tensor.expand_shape`` of a ``tensor.extract_slice`` with a dynamic offset,
which IREE 3.13 failed to compile ("expected rank to be smaller or equal to
the other rank"): the graph ran eagerly (fuzzer seed 960551: ``t[::2]`` of a
``[2]`` tensor stacked with its transpose). Here such a slice becomes a
``tensor.extract`` of the element and a ``tensor.from_elements`` of it: the
same value, which IREE compiles.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")
MARK = "lazy_mlir.one_element_slice"


def element_slices_as_extracts(module) -> int:
    """Rewrite each one-element ``tensor.extract_slice`` at a runtime offset
    that a reshape uses; returns how many."""
    count = 0
    for op in E.ops_named(module, "tensor.extract_slice"):
        if any(user.name in RESHAPES for user in E.users(op.results[0])) \
                and E.element_slice_as_extract(op, MARK):
            count += 1
    return count
