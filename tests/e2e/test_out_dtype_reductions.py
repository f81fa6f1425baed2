"""A reduction with ``out=`` of another dtype and no ``dtype`` computes in
the out= tensor's dtype, as eager's kernel does (``lazy.dispatch``)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm

_REDUCTIONS = {
    "sum": lambda x, o: torch.sum(x, 0, out=o),
    "prod": lambda x, o: torch.prod(x, 0, out=o),
    "cumsum": lambda x, o: torch.cumsum(x, 1, out=o),
    "cumprod": lambda x, o: torch.cumprod(x, 1, out=o),
    "mean": lambda x, o: torch.mean(x, 0, out=o),
}


@pytest.mark.parametrize("name", sorted(_REDUCTIONS))
def test_a_float_reduction_into_an_int_or_wider_out(name):
    """Fuzzer seed 802102: ``torch.sum(v0, 0, out=v1)`` of float32 into
    int64 summed the floats and truncated the sum (0 for -1: eager
    truncates each element, then sums), silently, on the lazy device and
    under ``lm.jit``."""
    fn = _REDUCTIONS[name]
    x = torch.tensor([[2.5, -2.0, -1.0, 3.875], [2.125, 1.625, 1.625, 2.0]])
    shape = (2, 4) if name.startswith("cum") else (4,)
    for dtype in ((torch.float64,) if name == "mean" else (torch.int64, torch.float64)):
        want = fn(x, torch.zeros(shape, dtype=dtype))
        got = fn(x.to("lazy"), torch.zeros(shape, dtype=dtype).to("lazy"))
        lm.mark_step()
        assert torch.equal(got.cpu(), want), (dtype, got.cpu(), want)
        jitted = lm.jit(fn).lower(x, torch.zeros(shape, dtype=dtype)).compile()
        assert torch.equal(jitted(x, torch.zeros(shape, dtype=dtype)), want), dtype
