"""uint8 operands of ops that promote: converted first.

torch-mlir's lowering of an op whose operands have different types converts
each to the promoted type itself, and takes a uint8 operand as signed there:
``uint8 200 * 1.5`` gave -84.0, ``cat([uint8, float])`` and ``where(c,
uint8, float)`` -56.0, silently (fuzzer seed 68). ``.to`` converts uint8
exactly, so these ops get their uint8 operands converted to the promoted
type first. Chained above every other import decomposition of the op (this
module loads last: ``registry.DOMAINS``).
"""
from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten
DEFAULT = ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT

_PROMOTING = [
    aten.cat.default, aten.stack.default, aten.where.self, aten.mul.Tensor, aten.div.Tensor,
    aten.div.Tensor_mode, aten.sub.Tensor, aten.add.Tensor, aten.maximum.default,
    aten.minimum.default, aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor,
    aten.gt.Tensor, aten.ge.Tensor, aten.atan2.default, aten.copysign.Tensor,
    aten.lerp.Tensor, aten.clamp.Tensor, aten.fmax.default, aten.fmin.default,
    aten.floor_divide.default, aten.pow.Tensor_Tensor,
    aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar,
]


def _operands(args) -> list:
    out = []
    for a in args:
        if isinstance(a, (list, tuple)):
            out += [t for t in a if isinstance(t, torch.Tensor)]
        elif isinstance(a, torch.Tensor) or (isinstance(a, (int, float)) and not isinstance(a, bool)):
            out.append(a)
    return out


def _uint8_promoted(op, below):
    def decomposition(*args, **kwargs):
        operands = _operands(args)
        tensors = [t for t in operands if isinstance(t, torch.Tensor)]
        if any(t.dtype == torch.uint8 for t in tensors) and len(operands) > 1:
            dtype, _ = elementwise_dtypes(*operands, type_promotion_kind=DEFAULT)
            if dtype != torch.uint8:
                def wide(a):
                    if isinstance(a, torch.Tensor) and a.dtype == torch.uint8:
                        return aten._to_copy.default(a, dtype=dtype)
                    if isinstance(a, (list, tuple)):
                        return type(a)(wide(t) for t in a)
                    return a
                return op(*[wide(a) for a in args], **kwargs)
        return below(*args, **kwargs) if below is not None else NotImplemented
    return decomposition


for _op in _PROMOTING:
    register_decomposition(_op, scope=IMPORT, priority=20, overrides=True, chained=True)(
        _uint8_promoted)
