"""Regression tests of what the differential fuzzer (tests/fuzz/) found,
each the shrunk program of its finding, compared with eager PyTorch."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import Counters, lazy


def test_inplace_scalar_overloads_named_apart():
    """``pow_.Scalar`` is ``pow.Tensor_Scalar`` (``pow.Scalar`` is Scalar **
    Tensor): ``x.pow_(2)`` raised at the call; so did ``float_power_`` and
    ``ldexp_``."""
    x0 = torch.tensor([1.5, -2.0, 3.0])
    e = x0.clone()
    e.pow_(2)
    c = Counters()
    x = lazy(x0)
    x.pow_(2)
    f = lazy(x0.double())
    f.float_power_(3)
    m = lazy(x0)
    m.ldexp_(torch.tensor([1, 2, 3]).to("lazy"))
    lm.mark_step()
    assert torch.equal(x.cpu(), e)
    assert torch.equal(f.cpu(), x0.double().float_power_(3))
    assert torch.equal(m.cpu(), x0.clone().ldexp_(torch.tensor([1, 2, 3])))
    assert not c.fell_back() and c.delta("EagerGraph") == 0
