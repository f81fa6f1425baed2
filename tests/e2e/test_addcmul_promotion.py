"""``addcmul_``/``addcdiv_`` with factors of a narrower dtype than ``self``
multiply them in the result's dtype, as eager does (``lazy/scalars.py``)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import lazy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int16_factors_of_a_float_tensor_do_not_wrap(dtype):
    """300 * 300 wraps in int16: the product was taken in the factors'
    dtype, then added (fuzzer seed 700012: ``addcmul_`` of a bfloat16
    tensor by its own bits viewed as int16, silent under lm.jit)."""
    x0 = torch.tensor([1.0, -2.0, 0.5], dtype=dtype)
    t0 = torch.tensor([300, -200, 7], dtype=torch.int16)
    want = x0.clone().addcmul_(t0, t0, value=0.5)
    x = lazy(x0)
    x.addcmul_(lazy(t0), lazy(t0), value=0.5)
    lm.mark_step()
    assert torch.equal(x.cpu(), want)
