"""The backward of ``F.grid_sample`` compiles (``ops/grid_sample_backward.py``):
the spatial transformer network tutorial ran ``grid_sampler_2d_backward``
eagerly every step. Both gradients match eager's for each mode, padding and
corner alignment, in 2-d and 3-d, and a gradient not asked for is not made."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import lazy

_G = torch.Generator().manual_seed(0)


def _grads(x, grid, grad, kw, device):
    x = x.clone().to(device).requires_grad_()
    grid = grid.clone().to(device).requires_grad_()
    F.grid_sample(x, grid, **kw).backward(grad.to(device))
    return x.grad.cpu(), grid.grad.cpu()


@pytest.mark.parametrize("dims,mode,padding,align_corners", [
    (2, *case) for case in itertools.product(["bilinear", "nearest"],
                                             ["zeros", "border", "reflection"], [False, True])
] + [(3, "bilinear", "zeros", False), (3, "bilinear", "reflection", True)])
def test_grid_sample_gradients_match_eager(dims, mode, padding, align_corners, counters):
    x = torch.randn(2, 3, *[5, 6, 7][:dims], generator=_G)
    grid = torch.rand(2, *[4, 3, 5][:dims], dims, generator=_G) * 2.4 - 1.2  # some outside
    grad = torch.randn(2, 3, *grid.shape[1:-1], generator=_G)
    kw = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    want = _grads(x, grid, grad, kw, "cpu")
    got = _grads(x, grid, grad, kw, "lazy")
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    assert counters.fell_back() == []


def test_a_spatial_transformer_step_runs_no_op_eagerly(counters):
    # the STN tutorial: the input needs no gradient, only the grid (theta) does.
    # (A random theta: a point on a pixel's edge, which a round theta gives,
    # may fall in either cell after rounding, with another slope.)
    theta = torch.eye(2, 3) + 0.1 * torch.randn(4, 2, 3, generator=_G)
    x = torch.randn(4, 1, 12, 12, generator=_G)
    for device in ("cpu", "lazy"):
        t = theta.clone().to(device).requires_grad_()
        grid = F.affine_grid(t, x.shape, align_corners=False)
        F.grid_sample(x.to(device), grid, align_corners=False).square().sum().backward()
        if device == "cpu":
            want = t.grad
    torch.testing.assert_close(t.grad.cpu(), want, rtol=1e-4, atol=1e-4)
    assert counters.fell_back() == []
