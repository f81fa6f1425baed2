"""A view of an argument that the graph also writes in place is returned as
a copy of its own (a linalg-stage pass, every target).

``v4 = v1.clone(); v1[1] = True`` with ``v1`` a strided view of a device
tensor lowers to one module that returns ``tensor.extract_slice %arg0`` (the
clone folds away: value semantics) and inserts into ``%arg0``
(``insert_slice``, which IREE does in place in the argument's buffer). IREE
returns a slice as a view of the buffer it slices, so the returned clone
would read the write: ``pipeline.in_place.argument_read_after_in_place_write``
refused such modules and their graphs ran eagerly (fuzzer seed 700000,
``EagerGraph``). Here each such returned view is passed through a copy
(``linalg_edit.copy_before``: a dispatch IREE cannot fold away, which it
orders before the in-place write as it does any compute that reads the
argument). Modules with dynamic sizes are left to the check.
"""
from __future__ import annotations

import re

from ..dialects import linalg_edit as E

_INSERTS = ("tensor.insert_slice", "tensor.insert")


def _main(module):
    for op in module.body.operations:
        if op.operation.name == "func.func" and str(op.attributes["sym_name"]) == '"main"':
            return op
    return None


def copy_returned_views(module) -> int:
    """Copy each result of ``main`` that views an argument an insert writes
    into (directly or through views); returns how many."""
    main = _main(module)
    if main is None or not len(main.regions[0].blocks):
        return 0
    block = main.regions[0].blocks[0]
    args = set(block.arguments)
    written = {E.viewed(op.operands[1]) for name in _INSERTS for op in E.ops_named(module, name)}
    written &= args
    if not written:
        return 0
    ret = list(block.operations)[-1]
    count = 0
    for index, value in enumerate(list(ret.operands)):
        op = E.producer(value)
        if op is None or op.name not in E.TENSOR_VIEWS or E.viewed(value) not in written \
                or E.shape(value) is None:
            continue
        E.copy_before(ret, index)
        count += 1
    return count


def count_in(linalg_text: str) -> int:
    """How many of a printed ``main``'s results are copies of their own."""
    main = linalg_text.find("func.func @main(")
    body = linalg_text[main:] if main >= 0 else ""
    ret = re.search(r"^\s*(?:func\.)?return (.*?) :", body, re.M)
    if ret is None:
        return 0
    returned = {v.strip() for v in ret.group(1).split(",")}
    copies = set(re.findall(rf"^\s*(%[\w#]+) = linalg\.generic [^\n]*{re.escape(E.OWN_COPY)}",
                            body, re.M))
    return len(returned & copies)
