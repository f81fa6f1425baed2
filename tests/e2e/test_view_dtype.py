"""``view(dtype)`` compiles as a bitcast (``passes/bitcast.py``; one of
another width too) and so do the ops PyTorch writes with it:
``signbit`` and ``copysign``, exact for -0.0 and NaN signs."""
from __future__ import annotations

import torch

from e2e_helpers import lazy

NAN, INF = float("nan"), float("inf")
_X = torch.tensor([1.0, -2.0, -0.0, 0.0, NAN, -NAN, INF, -INF, 1e-30])


def _no_fallback(counters):
    import lazy_mlir as lm
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and counters.delta(n)]


def test_view_dtype_bits_and_back(counters):
    bits = (lazy(_X) * 1).view(torch.int32) + 1
    assert torch.equal(bits.cpu(), _X.view(torch.int32) + 1)
    i64 = torch.tensor([1, -2, 2 ** 62])
    assert torch.equal(lazy(i64).view(torch.float64).view(torch.int64).cpu() * 3, i64 * 3)
    _no_fallback(counters)


def test_signbit_and_copysign(counters):
    assert torch.equal(torch.signbit(lazy(_X)).cpu(), torch.signbit(_X))
    mag = torch.arange(9.0) - 4
    torch.testing.assert_close(torch.copysign(lazy(mag), lazy(_X)).cpu(), torch.copysign(mag, _X))
    assert torch.equal(torch.signbit(torch.copysign(lazy(mag), lazy(_X))).cpu(),
                       torch.signbit(torch.copysign(mag, _X)))
    _no_fallback(counters)


def test_width_changing_view_compiles(counters):
    # (flow.tensor.bitcast: the same bytes in another shape; fell back before)
    x = torch.tensor([[1.0, -2.0], [0.1, 3e38]])
    assert torch.equal(lazy(x).view(torch.uint8).cpu(), x.view(torch.uint8))
    u8 = lazy(x).view(torch.uint8) + 1
    assert torch.equal(u8.view(torch.int16).view(torch.float32).cpu(),
                       (x.view(torch.uint8) + 1).view(torch.float32))
    _no_fallback(counters)
