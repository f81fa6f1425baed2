"""``weight_norm``'s gradient (``_weight_norm_interface_backward``, which
PyTorch has no decomposition of) compiles and matches eager: it ran eagerly
in every step of wav2vec2 and HuBERT (their positional convolution)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_gradients(dim, counters):
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), dim=dim)
    x = torch.randn(2, 4, 8)
    conv(x).square().sum().backward()
    want = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad(set_to_none=True)
    lazy_conv = conv.to("lazy")
    counters.snapshot()
    lazy_conv(x.to("lazy")).square().sum().backward()
    lm.mark_step()
    for w, p in zip(want, lazy_conv.parameters()):
        torch.testing.assert_close(p.grad.cpu(), w, rtol=1e-5, atol=1e-5)
    assert not counters.fell_back(), counters.fell_back()
