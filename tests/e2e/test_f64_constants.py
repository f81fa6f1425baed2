"""A float argument that f32 cannot hold exactly (``norm``'s ``p=0.3``)
compiles (``passes/f64_constants.py``): its f64 constant's truncation to
f32 stayed in the host code of ``1 / p``, which iree-compile cannot lower
with f64 kept, and the norm ran eagerly (``0.5`` folded and compiled)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import same_as_eager


@pytest.mark.parametrize("p", [0.3, 0.4, 0.6, 1.7, 0.5])
def test_a_norm_of_a_fractional_order_compiles(p):
    x = torch.randn(4, 5)
    same_as_eager(lambda t: t.norm(p=p), x, no_fallback=True)
    same_as_eager(lambda t: torch.linalg.vector_norm(t, ord=p, dim=1), x, no_fallback=True)
