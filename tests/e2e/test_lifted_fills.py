"""A number that changes every step in ``x.new_full``, ``torch.full_like``
or ``t - x`` is a graph input (``lazy/scalars.py``): a DDPM sampling loop's
``x.new_full((b,), t, dtype=torch.long)`` compiled a graph per timestep."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import compiles_once_over_numbers


@pytest.mark.parametrize("fn", [
    lambda x, t: x.new_full((4,), t) * x,
    lambda x, t: x + x.new_full((4,), int(t * 10), dtype=torch.long),
    lambda x, t: torch.full_like(x, t) - x,
    lambda x, t: t - x,
    lambda x, t: int(t * 10) - x,
], ids=["new_full", "new_full_long", "full_like", "rsub", "rsub_int"])
def test_a_new_number_each_step_compiles_once(fn):
    compiles_once_over_numbers(fn, torch.randn(4))
