"""segment_reduce (lengths and offsets) compiled (no fallback) and equal to
eager: every reduction, NaN and infinities inside and outside segments,
empty segments with and without ``initial``, a leftover tail, axis 1
(``dialects/segment_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import same_as_eager

NAN, INF = float("nan"), float("inf")

_DATA = torch.tensor([[1., 2., NAN, -INF, 3., 0.5, -0.0, 4.],
                      [2., -1., 5., INF, 1., NAN, 2., -3.]])
_LENGTHS = torch.tensor([[2, 0, 2, 3], [1, 3, 0, 2]])     # row 1 leaves a tail of 2
_OFFSETS = torch.tensor([[0, 2, 2, 4, 7], [0, 1, 4, 4, 6]])


def _all(data, seg, kind):
    # unsafe: eager would raise for the tail (lengths not summing to the axis)
    return [torch.segment_reduce(data, reduce, axis=1, initial=initial, unsafe=True,
                                 **{kind: seg})
            for reduce in ("sum", "prod", "max", "min", "mean") for initial in (None, 2.0)]


def test_segment_reduce_lengths():
    same_as_eager(lambda d, s: _all(d, s, "lengths"), _DATA, _LENGTHS, no_fallback=True)
    # an empty mean is NaN without initial, initial with it
    assert torch.segment_reduce(_DATA, "mean", axis=1, lengths=_LENGTHS, unsafe=True)[0, 1].isnan()


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_segment_reduce_offsets_axis0():
    same_as_eager(lambda d, s: _all(d.T.contiguous().T, s, "offsets"), _DATA, _OFFSETS,
                  no_fallback=True)
    same_as_eager(lambda d, s: [torch.segment_reduce(d, "mean", offsets=s),
                                torch.segment_reduce(d, "max", offsets=s, initial=-1)],
                  _DATA.T.contiguous(), torch.tensor([0, 3, 3, 8]), no_fallback=True)
