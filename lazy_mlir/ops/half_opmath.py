"""``addcmul``/``addcdiv`` of float16 and bfloat16 as eager's CPU kernels
compute them: in float32 (their opmath), ``self + value * t1 * t2`` (or
``/ t2``) left to right, rounded to the narrow dtype once (import time).

torch-mlir's decomposition multiplies and adds in the narrow dtype, rounding
after each op: ``v.addcmul_(v, v, value=0.5)`` on float16 was an ulp off
eager's (fuzzer seed 960188). Capture's lifted ``value`` takes the same path
(``lazy/scalars.py``).
"""
from __future__ import annotations

import torch

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten
NARROW = (torch.float16, torch.bfloat16)


def addc_in_float32(op, self, t1, t2, value, record=None):
    """``self + value * t1 * t2`` (``op`` "addcmul") or ``self + value * t1
    / t2`` of tensors (``value`` a number or a 0-d float32 tensor), in
    float32, in the narrow dtype ``t1`` and ``t2`` share; each op made by
    ``record(op, args, kwargs)`` where given (capture's)."""
    call = record or (lambda f, args, kwargs: f(*args, **kwargs))
    wide = [call(aten._to_copy.default, (t,), {"dtype": torch.float32}) for t in (self, t1, t2)]
    scaled = call(aten.mul.Tensor, (wide[1], value), {})
    inner = call(aten.mul.Tensor if op == "addcmul" else aten.div.Tensor, (scaled, wide[2]), {})
    return call(aten._to_copy.default, (call(aten.add.Tensor, (wide[0], inner), {}),),
                {"dtype": t1.dtype})


def _narrow_operands(self, t1, t2) -> bool:
    return self.dtype in NARROW and t1.dtype == self.dtype and t2.dtype == self.dtype


@register_decomposition(aten.addcmul.default, scope=IMPORT)
def addcmul(self, tensor1, tensor2, *, value=1):
    if not _narrow_operands(self, tensor1, tensor2):
        return NotImplemented
    return addc_in_float32("addcmul", self, tensor1, tensor2, value)


@register_decomposition(aten.addcdiv.default, scope=IMPORT)
def addcdiv(self, tensor1, tensor2, *, value=1):
    if not _narrow_operands(self, tensor1, tensor2):
        return NotImplemented
    return addc_in_float32("addcdiv", self, tensor1, tensor2, value)
