"""A returned bool tensor is converted to bytes in a dispatch of its own (a
linalg-stage pass, every target).

``[y, y >= 2, (y >= 2).view(torch.uint8)]`` (fuzzer seed 960657: an
argument written in place, a comparison of it, and the comparison's byte
view, all returned) lowers to a float result, an ``i1`` result and an
``i8`` one converted from it (``arith.extui``), which IREE 3.13 fuses into
one dispatch. Its codegen then failed ("'linalg.generic' op write affecting
operations on global resources are restricted to workgroup distributed
contexts": IREE stores ``i1`` as bytes, so the conversion is a copy of a
result into another): ``lm.jit`` raised and ``torch.compile`` ran the graph
eagerly. Here the conversion reads the ``i1`` tensor through
``linalg_edit.FUSION_BARRIER``: the two results come from two dispatches
(no value changes; the conversion is a small dispatch of its own).
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

MARK = "lazy_mlir.bool_bytes_apart"


def _returned(value) -> bool:
    return any(user.name == "func.return" for user in E.users(value))


def bool_bytes_apart(module) -> int:
    """Barrier the ``i1`` input of each ``linalg.generic`` that makes bytes
    of it (one input, an ``i8`` result) when the ``i1`` tensor is returned
    too; returns how many."""
    count = 0
    for op in E.ops_named(module, "linalg.generic"):
        if len(op.operands) != 2 or len(op.results) != 1:
            continue
        source = op.operands[0]
        if E.shape(source) is None or E.element_type(source) != "i1" or E.element_type(op.results[0]) != "i8" \
                or E.producer(source) is None or not _returned(source):
            continue
        E.barrier_before(op, 0)
        E.mark(op, MARK)
        count += 1
    return count
