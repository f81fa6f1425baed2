"""Ops given Python numbers where a lifted scalar cannot stand as the
``.Tensor`` sibling's argument compute eager's values."""
from __future__ import annotations

import torch

from e2e_helpers import same_as_eager


def test_rsub_with_and_without_alpha():
    x = torch.tensor([1.0, -2.0, 0.5])
    same_as_eager(lambda t: (torch.rsub(t, 2.5, alpha=2), torch.rsub(t, 2.5), 1.5 - t), x,
                  no_fallback=True)
