"""``F.grid_sample`` of volumes compiles (``dialects/grid_sample_decompositions.py``)
and matches eager for every mode, padding and corner alignment, NaN and
infinite coordinates included."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import lazy

_G = torch.Generator().manual_seed(0)
_X = torch.randn(2, 3, 5, 6, 7, generator=_G)
_GRID = torch.rand(2, 4, 3, 5, 3, generator=_G) * 2.4 - 1.2  # some points outside
_GRID[0, 0, 0, 0] = float("nan")
_GRID[1, 0, 0, 0, 1] = float("nan")
_GRID[1, 1, 1, 1, 0] = float("inf")


@pytest.mark.parametrize("mode,padding,align_corners", list(itertools.product(
    ["bilinear", "nearest"], ["zeros", "border", "reflection"], [False, True])))
def test_grid_sample_3d_matches_eager(mode, padding, align_corners, counters):
    kw = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    actual = F.grid_sample(lazy(_X), lazy(_GRID), **kw)
    torch.testing.assert_close(actual.cpu(), F.grid_sample(_X, _GRID, **kw), equal_nan=True)
    assert counters.delta("decomposed::grid_sampler_3d") == 1
    assert counters.delta("aten::grid_sampler_3d") == 0
