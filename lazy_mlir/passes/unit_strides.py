"""A slice steps by 1 along a dimension it takes one element of (a
linalg-stage pass, every target).

``x[:, 0:1:3]`` (a step on a dimension of size 1, as a strided slice over a
unit dimension gives) lowers to a ``tensor.extract_slice`` of stride 3 and
size 1 there: the same element as stride 1. IREE 3.13 fails to compile such
a slice once a later slice reads it (a roll of it, a concatenation):
"expected result type to be 'memref<1x1x1x1x4xf32, ...>' or a rank-reduced
version (mismatch of result layout)": its subview's rank reduction keeps the
unit dimension of stride 3 apart. ``lm.jit`` raised and ``torch.compile``'s
graph ran eagerly (fuzzer seed 980073). The stride becomes 1 wherever the
size is 1; no value changes.
"""
from __future__ import annotations

from ..dialects.torch_import import ir

from ..dialects import linalg_edit as E

MARK = "lazy_mlir.unit_strides"


def unit_strides(module) -> int:
    """Set to 1 each static stride of a ``tensor.extract_slice`` or
    ``insert_slice`` along a dimension of static size 1; returns how many
    slices changed."""
    count = 0
    for name in ("tensor.extract_slice", "tensor.insert_slice"):
        for op in E.ops_named(module, name):
            sizes, strides = E.i64_array(op, "static_sizes"), E.i64_array(op, "static_strides")
            if sizes is None or strides is None:
                continue
            fixed = [1 if size == 1 else stride for size, stride in zip(sizes, strides)]
            if fixed != strides:
                op.attributes["static_strides"] = ir.DenseI64ArrayAttr.get(fixed, op.context)
                E.mark(op, MARK)
                count += 1
    return count
