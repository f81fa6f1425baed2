"""``addcmul``/``addcdiv`` as eager's CPU kernels compute them (import
time): ``self + value * t1 * t2`` (or ``/ t2``) left to right, in the dtype
the three promote to, float16 and bfloat16 in float32 (their opmath) and
rounded once. PyTorch's reference decomposition (``torch._refs``) is that.

torch-mlir's decomposition multiplies and adds in the narrow dtype, rounding
after each op: ``v.addcmul_(v, v, value=0.5)`` on float16 was an ulp off
eager's (fuzzer seed 960188). It also typed ``t1 * t2`` with the result's
shape, so ``self`` broadcasting the two (``x.unsqueeze(-2).addcmul_(t, t)``,
``m.addcmul_(s, s)`` of a 0-d ``s``) failed torch-mlir's linalg pipeline
("'tensor.cast' op ... cast incompatible"): the graph ran eagerly, and
``lm.jit`` raised (fuzzer seeds 960527 and 960626). Capture's lifted
``value`` of a narrow dtype takes ``addc_in_float32`` (``lazy/scalars.py``).
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


def _refs(op):
    from torch._decomp import decomposition_table
    return decomposition_table[op]


@register_decomposition(aten.addcmul.default, scope=IMPORT)
def addcmul(self, tensor1, tensor2, *, value=1):
    return _refs(aten.addcmul.default)(self, tensor1, tensor2, value=value)


@register_decomposition(aten.addcdiv.default, scope=IMPORT)
def addcdiv(self, tensor1, tensor2, *, value=1):
    if not (tensor1.is_floating_point() or tensor2.is_floating_point()):
        return NotImplemented  # (eager's error: no integer division here)
    return _refs(aten.addcdiv.default)(self, tensor1, tensor2, value=value)
