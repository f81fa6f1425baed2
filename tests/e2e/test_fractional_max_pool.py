"""Fractional max pooling compiles (``dialects/pool_decompositions.py``) and
gives eager's values and indices for the same random samples: ties, NaN,
-inf, unbatched inputs, 2-d and 3-d."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import lazy

_G = torch.Generator().manual_seed(0)
_X = torch.randn(2, 3, 9, 9, generator=_G)
_TIES = torch.round(_X * 2) / 2
_TIES[0, 0, 1, 1:3] = float("nan")
_TIES[1, 2] = float("-inf")
_V = torch.randn(2, 2, 7, 8, 9, generator=_G)

CASES = {
    "2d": (F.fractional_max_pool2d, _X, dict(kernel_size=3, output_size=(2, 3))),
    "2d_ratio": (F.fractional_max_pool2d, _X, dict(kernel_size=(2, 3), output_ratio=(0.5, 0.5))),
    "2d_unbatched": (F.fractional_max_pool2d, _X[0], dict(kernel_size=3, output_size=4)),
    "2d_ties_nan_inf": (F.fractional_max_pool2d, _TIES, dict(kernel_size=3, output_size=(4, 5))),
    "2d_empty_batch": (F.fractional_max_pool2d, _X[:0], dict(kernel_size=3, output_size=2)),
    "3d_empty_batch": (F.fractional_max_pool3d, _V[:0], dict(kernel_size=2, output_size=2)),
    "3d": (F.fractional_max_pool3d, _V, dict(kernel_size=2, output_size=(3, 4, 5))),
    "3d_unbatched": (F.fractional_max_pool3d, _V[0], dict(kernel_size=(2, 3, 2),
                                                          output_ratio=(0.5, 0.5, 0.5))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fractional_max_pool_matches_eager(name, counters):
    fn, x, kw = CASES[name]
    torch.manual_seed(3)
    expected = fn(x, return_indices=True, **kw)
    torch.manual_seed(3)  # the same samples: drawn on the host, as eager draws them
    actual = fn(lazy(x), return_indices=True, **kw)
    torch.testing.assert_close(actual[0].cpu(), expected[0], equal_nan=True)
    assert torch.equal(actual[1].cpu(), expected[1])
    assert not [n for n in ("aten::fractional_max_pool2d", "aten::fractional_max_pool3d")
                if counters.delta(n)]
