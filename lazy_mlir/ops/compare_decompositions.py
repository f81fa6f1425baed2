"""Comparisons of a float tensor with an int number compare with a float.

torch-mlir folds ``gt.Scalar(splat 0.3, 0)`` (an int ``0``) to all-false:
``torch.full_like(x, 0.3) > 0`` answered False. With the number as a float
the fold is right, and the comparison means the same (eager promotes it).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _float_number(op):
    def decomposition(x, other):
        if not x.dtype.is_floating_point or type(other) is not int:
            return NotImplemented
        return op(x, float(other))
    return decomposition


COMPARE_DECOMPOSITIONS = {
    op: _float_number(op) for op in (aten.gt.Scalar, aten.lt.Scalar, aten.ge.Scalar,
                                      aten.le.Scalar, aten.eq.Scalar, aten.ne.Scalar)
}
