"""mode compiled (no fallback) and equal to eager, indices included (eager's
sort is an insertion sort, stable, up to 16 elements): ties between equally
frequent values, infinities, NaN last in the slice and all-NaN slices, 0-d,
keepdim, integers and bool (``dialects/mode_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import lazy, same_as_eager

NAN, INF = float("nan"), float("inf")


def _compiled_as_eager(fn, *inputs):
    same_as_eager(fn, *inputs, exact=True, no_fallback=True)


def test_mode_float_special_values():
    x = torch.tensor([[3., 1., 3., 1., 2., 5., 7., 0.],        # 1 and 3 twice: 1 (smaller)
                      [INF, -INF, INF, 2., -INF, INF, 0., 1.],  # inf three times
                      [4., 2., 9., 8., 1., 0., NAN, NAN],       # no repeat (NaN apart): 0.
                      [NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN],  # all NaN: NaN, index 0
                      [-1., 6., 6., -1., 6., -1., 2., NAN]])    # 6 and -1 thrice: -1
    _compiled_as_eager(lambda t: torch.mode(t, 1), x)


@pytest.mark.slow
def test_mode_int_bool_keepdim_and_0d():
    x = torch.randint(0, 4, (3, 7, 5), generator=torch.Generator().manual_seed(0))
    _compiled_as_eager(lambda t: torch.mode(t, 1), x)
    _compiled_as_eager(lambda t: torch.mode(t, -1, keepdim=True), x > 1)
    _compiled_as_eager(lambda t: torch.mode(t), torch.tensor(2.5))
    _compiled_as_eager(lambda t: torch.mode(t, 0, keepdim=True),
                       torch.tensor([[3., NAN], [3., 1.], [-0.0, 1.], [0.0, 1.]]))


@pytest.mark.slow
def test_mode_long_slice_value():
    # above 16 elements eager's introsort is unstable: compare the value, and
    # that the index points at it
    x = torch.randint(-5, 5, (2, 300), generator=torch.Generator().manual_seed(1)).float()
    v, i = torch.mode(lazy(x), 1)
    ev, _ = torch.mode(x, 1)
    assert torch.equal(v.cpu(), ev)
    assert torch.equal(x.gather(1, i.cpu().unsqueeze(1)).squeeze(1), ev)
