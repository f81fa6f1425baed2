"""A one-element slice that a reshape reaches is read as its element (a
linalg-stage pass, every target).

A one-element slice given unit dimensions (``torch.stack([y[i:i+1],
y[j:j+1]])``, ``y[i].unsqueeze(0)``, ``x.split(1)[1].view(1, -1)``, a roll's
wrapped element then reshaped) lowers to a ``tensor.extract_slice`` whose
sizes are all 1 and a ``tensor.expand_shape`` after it, directly or after
elementwise ops and concatenations. IREE 3.13's ``BubbleUpExpandShapesPass``
moves the expansion up to the slice and there builds a slice of a higher rank
than its source, which fails to verify ("expected rank to be smaller or equal
to the other rank"): the graph ran eagerly (fuzzer seeds 960551 on the lazy
device, where the offsets are runtime values; 902529, 940189, 940199, 970299
under ``torch.compile``, where ``lm.jit`` raised). Slices of more than one
element expand fine. Here such a slice becomes a ``tensor.extract`` of the
element and a ``linalg.fill`` of a new one-element tensor with it, which
IREE expands as any fill: the same value, every dtype (IREE reads the element
between dispatches). Not a ``tensor.from_elements``: IREE retyped a bool one
and failed to verify it (this pass's first form, withdrawn in dc6c120); nor
a ``linalg.generic`` that extracts the element in its body: IREE folds one at
constant offsets back into the slice.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

MARK = "lazy_mlir.element_fill"

# Ops IREE propagates an expansion through, up to a slice they read.
_PASS_THROUGH = ("tensor.concat", "tensor.collapse_shape", "tensor.cast", "linalg.generic")
_DEPTH = 12


def _reaches_expansion(value) -> bool:
    """Whether an ``expand_shape`` uses ``value``, directly or through
    ``_PASS_THROUGH`` ops (at most ``_DEPTH`` of them)."""
    todo, seen = [(value, 0)], 0
    while todo and seen < 64:
        v, depth = todo.pop()
        seen += 1
        for user in E.users(v):
            if user.name == "tensor.expand_shape":
                return True
            if user.name in _PASS_THROUGH and depth < _DEPTH and len(user.results) == 1:
                todo.append((user.results[0], depth + 1))
    return False


def fill_reshaped_elements(module) -> int:
    """Rewrite each one-element ``tensor.extract_slice`` of a static tensor
    that an expansion reaches; returns how many."""
    count = 0
    for op in E.ops_named(module, "tensor.extract_slice"):
        if E.one_element_slice(op.results[0]) is None or E.shape(op.operands[0]) is None \
                or not _reaches_expansion(op.results[0]):
            continue
        E.mark(E.element_fill(op), MARK)
        count += 1
    return count
