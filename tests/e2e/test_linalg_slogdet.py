"""``slogdet`` and ``logdet`` compile through the unrolled LU factorization
(``dialects/linalg_det_decompositions.py``) and match eager, singular and
NaN matrices included."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import lazy

_G = torch.Generator().manual_seed(0)
MATRICES = {
    "3x3": torch.randn(3, 3, generator=_G),
    "batched": torch.randn(2, 4, 5, 5, generator=_G),
    "zeros": torch.zeros(3, 3),
    "singular": torch.tensor([[1.0, 2.0], [2.0, 4.0]]),
    "1x1_negative": torch.tensor([[-2.5]]),
    "transposed": torch.randn(4, 4, generator=_G).t(),
    "nan": torch.tensor([[float("nan"), 1.0], [1.0, 1.0]]),
    "empty_batch": torch.randn(0, 5, 5),
    "0x0": torch.randn(3, 0, 0),
    "empty_batch_of_0x0": torch.randn(0, 0, 0),
}


# CI time: a compile per matrix; the transposed and 1x1 ones run with --runslow
_SLOW = {"transposed", "1x1_negative"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n
                                  for n in MATRICES])
def test_slogdet_and_logdet_match_eager(name, counters):
    a = MATRICES[name]
    expected, actual = torch.linalg.slogdet(a), torch.linalg.slogdet(lazy(a))
    torch.testing.assert_close(actual.sign.cpu(), expected.sign, equal_nan=True)
    torch.testing.assert_close(actual.logabsdet.cpu(), expected.logabsdet, equal_nan=True)
    torch.testing.assert_close(torch.logdet(lazy(a)).cpu(), torch.logdet(a), equal_nan=True)
    assert counters.delta("aten::_linalg_slogdet") == 0
