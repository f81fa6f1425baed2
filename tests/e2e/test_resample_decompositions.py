"""Antialiased resizing compiles as two matmuls with host-made weights
(``dialects/resample_decompositions.py``) and matches eager, gradients too."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import lazy

_X = torch.randn(2, 3, 10, 20, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("kw", [dict(size=(3, 3)), dict(size=(30, 41)),
                                dict(scale_factor=(1.7, 0.9)),
                                dict(scale_factor=(0.8, 1.0), align_corners=True)],
                         ids=["down", "up", "scales", "align_corners"])
def test_antialiased_resize_matches_eager(mode, kw, counters):
    expected = F.interpolate(_X, mode=mode, antialias=True, **kw)
    actual = F.interpolate(lazy(_X), mode=mode, antialias=True, **kw)
    torch.testing.assert_close(actual.cpu(), expected)
    assert counters.delta(f"decomposed::_upsample_{mode}2d_aa") == 1
    assert counters.delta(f"aten::_upsample_{mode}2d_aa") == 0


def test_antialiased_resize_gradient(counters):
    x, xl = _X.clone().requires_grad_(), lazy(_X).requires_grad_()
    for t in (x, xl):
        F.interpolate(t[:, :, 1:, ::2], size=(4, 6), mode="bilinear",  # a non-contiguous input
                      antialias=True).pow(2).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad)
    assert counters.delta("aten::_upsample_bilinear2d_aa_backward") == 0


@pytest.mark.parametrize("mode,kw", [("bilinear", dict(scale_factor=1.5)),
                                     ("bicubic", dict(size=(7, 9), align_corners=True))])
def test_plain_resize_gradient(mode, kw, counters):
    """The backward of a plain bilinear/bicubic resize (nn.Upsample) fell back
    (no torch dialect op): now the transposed weight matrices."""
    x, xl = _X.clone().requires_grad_(), lazy(_X).requires_grad_()
    for t in (x, xl):
        F.interpolate(t[:, :, 1:], mode=mode, **kw).pow(2).sum().backward()
    torch.testing.assert_close(xl.grad.cpu(), x.grad)
    assert counters.delta(f"aten::upsample_{mode}2d_backward") == 0


def test_non_separable_weights_are_refused():
    """The guard: weights that do not reproduce ATen's resize are not used."""
    from lazy_mlir.ops import nn as rd
    aten = torch.ops.aten
    assert rd._weights(aten._upsample_bilinear2d_aa.default, (10, 20), (3, 3), False,
                       (None, None)) is not None
    squared = lambda x, *a: aten._upsample_bilinear2d_aa.default(x, *a) ** 2  # noqa: E731
    assert rd._weights(squared, (10, 20), (3, 3), False, (None, None)) is None
