"""A negative integer applied to a constant float tensor under torch.compile
(whose graphs keep numbers as constants) gives eager's value
(``passes/float_scalars``)."""
from __future__ import annotations

import torch

from e2e_helpers import compiled_like_eager


def _write_through_an_expand(v1):
    """Fuzzer seed 802122, shrunk: functionalized, ``v1`` is
    ``zeros + (-2)``, then ``3 - that`` added back; torch-mlir folded the
    ``-2`` as 2**64 - 2 and ``v1`` came back 0 for 3, silently."""
    v1.zero_()
    v3 = v1.expand((5, 4, 5))
    v1.add_(-2)
    v3.fill_(3.0)
    return [v1]


def _negative_ints(x):
    t = torch.full_like(x, 1.5)
    return [t + (-2), t - (-2), t * (-2), (-2) - t, torch.add(t, t, alpha=-2), t / (-2)]


def _make():
    return (torch.arange(100, dtype=torch.float32).reshape(5, 4, 5) / 2,)


def test_negative_integers_on_constant_float_tensors():
    for fn in (_write_through_an_expand, _negative_ints):
        compiled_like_eager(fn, _make)
