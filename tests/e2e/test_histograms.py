"""histc compiled (no fallback) and equal to eager, bit for bit: NaN and
infinities skipped, elements on the edges, the data's own range (all-equal
data widened by 1), empty and 0-d inputs (``dialects/histogram_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import lazy, same_as_eager

NAN, INF = float("nan"), float("inf")

# Edges of 4 bins over [-2, 2] are -2, -1, 0, 1, 2: elements on each, just
# inside, outside, NaN and infinities.
EDGY = torch.tensor([-2., -1., 0., 1., 2., -2.0001, 2.0001, 1.9999, -1.0001, 0.5, NAN, INF,
                     -INF, -0.0, 0.999999, 2., -2.])


def _compiled_as_eager(fn, *inputs):
    same_as_eager(fn, *inputs, exact=True, no_fallback=True)


def test_histc_given_range_special_values():
    _compiled_as_eager(lambda x: torch.stack([torch.histc(x, 4, -2, 2), torch.histc(x, 4, 0, 2),
                                              torch.histc(x, 4, -0.3, 0.7)]), EDGY)


def test_histc_data_range():
    x = torch.randn(7, 9, generator=torch.Generator().manual_seed(0)) * 3
    x[2, 3] = x.max() + 1  # the max lands in the last bin (right edge included)
    _compiled_as_eager(lambda t: torch.histc(t, 10), x)
    _compiled_as_eager(lambda t: torch.histc(t, 3, 5, 5), torch.full((4,), 2.5))  # widened by 1


def test_histc_empty_and_0d():
    _compiled_as_eager(lambda t: torch.histc(t, 5, 0, 1), torch.tensor(0.7))
    _compiled_as_eager(lambda t: torch.histc(t, 5), torch.tensor(-3.0))
    _compiled_as_eager(lambda t: torch.histc(t, 5), torch.zeros(0))


def test_histc_nonfinite_data_range():
    # eager raises (the range is not finite); a graph cannot, so every bin is NaN
    x = torch.tensor([1., NAN, 3.])
    with pytest.raises(RuntimeError):
        torch.histc(x, 4)
    assert torch.histc(lazy(x), 4).cpu().isnan().all()


def test_histogram_bin_count_and_edges():
    w = torch.linspace(-1.0, 2.0, EDGY.numel())
    _compiled_as_eager(lambda x, w: [*torch.histogram(x, 4, range=(-2.0, 2.0)),
                                     *torch.histogram(x, 3, range=(-0.3, 0.7), weight=w,
                                                      density=True),
                                     *torch.histogram(x, 5, range=(1.0, 1.0))], EDGY, w)


def test_histogram_bin_tensor_and_data_range():
    x = torch.randn(40, generator=torch.Generator().manual_seed(2))
    edges = torch.tensor([-1.5, -0.5, 0.0, 0.0, 0.25, 2.0])  # an empty bin of width 0
    xs = torch.cat([x, torch.tensor([NAN, INF, -1.5, 2.0, 0.0])])
    _compiled_as_eager(lambda x, e: [*torch.histogram(x, e),
                                     *torch.histogram(x, e, weight=x.abs(), density=True)],
                       xs, edges)
    _compiled_as_eager(lambda x: torch.histogram(x, 7), x)  # the data's min and max
