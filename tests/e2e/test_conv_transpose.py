"""A transposed convolution's backward compiles (``ops/conv.py``): torch-mlir
does not lower it, so every graph with a ConvTranspose backward (GAN
generators, decoders) ran eagerly. Gradients equal eager's across dims,
strides, padding, output padding, dilation and groups."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy

CASES = {  # name: (layer class, (C_in, C_out, kernel), keyword arguments, input spatial size)
    "2d_stride2_pad1": (nn.ConvTranspose2d, (6, 3, 4), dict(stride=2, padding=1), (5, 5)),
    "2d_outpad_dilation_groups": (nn.ConvTranspose2d, (4, 6, 3),
                                  dict(stride=2, padding=1, output_padding=1, dilation=2,
                                       groups=2), (4, 3)),
    "1d": (nn.ConvTranspose1d, (4, 2, 5), dict(stride=3, padding=2, bias=False), (7,)),
    "3d": (nn.ConvTranspose3d, (2, 3, 2), dict(stride=2), (3, 2, 3)),
}


@pytest.mark.parametrize("name", CASES)
def test_transposed_convolution_gradients_compile_like_eager(name, counters):
    cls, (cin, cout, k), kw, size = CASES[name]
    torch.manual_seed(0)
    layer, x = cls(cin, cout, k, **kw), torch.randn(2, cin, *size)
    xe = x.clone().requires_grad_()
    layer(xe).sin().sum().backward()
    expected = [xe.grad] + [p.grad for p in layer.parameters()]

    moved = cls(cin, cout, k, **kw).to("lazy")
    moved.load_state_dict(layer.state_dict())
    xl = lazy(x).requires_grad_()
    counters.snapshot()
    moved(xl).sin().sum().backward()
    lm.mark_step()
    for got, want in zip([xl.grad] + [p.grad for p in moved.parameters()], expected):
        assert_lazy_close(got, want, rtol=1e-4, atol=1e-4)
    assert not counters.fell_back(), counters.fell_back()
