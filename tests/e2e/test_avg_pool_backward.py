"""Average pooling's input gradient compiles for every form (``ops/nn.py``):
torch-mlir lowered neither ``avg_pool2d_backward`` with ``ceil_mode`` or an
empty stride (EfficientNet's pooler) nor ``avg_pool3d_backward`` at all
(``nn.LocalResponseNorm``), nor either direction of a kernel longer than its
padded input (``whole_windows``): each graph ran eagerly, counted as a
fallback."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy

CASES = {
    "2d_ceil": (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), (2, 3, 5, 5)),
    "2d_ceil_pad_exclude": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                   count_include_pad=False), (2, 3, 6, 7)),
    "2d_default_stride": (lambda x: F.avg_pool2d(x, 2), (2, 3, 6, 6)),
    "2d_divisor": (lambda x: F.avg_pool2d(x, 3, 1, 1, divisor_override=4), (2, 3, 5, 5)),
    # a kernel past its padded input, which ceil_mode allows (EfficientNet's pooler:
    # 320 wide over a 1x1 map; the forward failed to compile, the backward fell back)
    "2d_kernel_past_input": (lambda x: F.avg_pool2d(x, 320, ceil_mode=True), (2, 3, 1, 1)),
    "2d_kernel_past_one_axis": (lambda x: F.avg_pool2d(x, (7, 2), (3, 2), (1, 0), ceil_mode=True,
                                                       count_include_pad=False), (2, 3, 3, 6)),
    # forward decomposed too (ops/nn.avg_pool2d): the graph failed in torch-mlir or IREE
    "2d_unbatched": (lambda x: F.avg_pool2d(x, 2, ceil_mode=True), (3, 5, 5)),
    "2d_ceil_one_axis_partial": (lambda x: F.avg_pool2d(x, (3, 2), (3, 2), ceil_mode=True),
                                 (2, 3, 3, 5)),
    "3d_local_response_norm": (lambda x: nn.LocalResponseNorm(3)(x), (2, 4, 5, 5)),
    "3d_ceil_pad": (lambda x: F.avg_pool3d(x, 2, 2, 1, ceil_mode=True), (2, 2, 5, 4, 5)),
}


def _grad_compiles_like_eager(fn, x0, counters):
    """The input gradient of ``fn`` on the lazy device equals eager's, nothing ran eagerly."""
    x = x0.clone().requires_grad_()
    fn(x).square().sum().backward()
    xl = lazy(x0).requires_grad_()
    fn(xl).square().sum().backward()
    lm.mark_step()
    torch.testing.assert_close(xl.grad.cpu(), x.grad, rtol=1e-5, atol=1e-5)
    assert counters.fell_back() == [] and counters.delta("EagerGraph") == 0


@pytest.mark.parametrize("name", sorted(CASES))
def test_input_gradient_compiles_with_eager_values(name, counters):
    fn, shape = CASES[name]
    x0 = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    _grad_compiles_like_eager(fn, x0, counters)


@pytest.mark.parametrize("name,fn,shape", [
    ("hardshrink", nn.Hardshrink(0.3), (4, 16)),
    ("softshrink", nn.Softshrink(0.3), (4, 16)),
    ("adaptive_avg_pool_uneven", nn.AdaptiveAvgPool2d((3, 2)), (2, 3, 4, 5)),
    ("adaptive_avg_pool_global", nn.AdaptiveAvgPool2d(1), (2, 3, 4, 5)),
    ("adaptive_max_pool_overlapping", nn.AdaptiveMaxPool2d((3, 4)), (2, 3, 7, 5)),
    ("adaptive_max_pool_3d", nn.AdaptiveMaxPool3d((2, 3, 2)), (2, 3, 4, 6, 5)),
])
def test_backward_of_ops_outside_the_dialect_compiles(name, fn, shape, counters):
    """Backward ops the torch dialect lacks, decomposed before import (each ran
    eagerly every step: the sweep's nn/activations and nn/pooling)."""
    x0 = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    _grad_compiles_like_eager(fn, x0, counters)
