"""The channels_last_pointwise fx pass: a pointwise op whose result is also read
channels last is computed channels last; checked on traced graphs, against
the graph before the pass on real tensors (no compiler)."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.passes.channels_last_pointwise import channels_last_pointwise

aten = torch.ops.aten


def _traced(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _ops(gm):
    return [(n.target, n.args) for n in gm.graph.nodes if n.op == "call_function"]


def _both_layouts(x):
    y = torch.relu(x * 2)
    return y.permute(0, 2, 3, 1).sum(3), (y <= 0).float()  # pooled channels last, mask first


def test_relu_read_both_ways_is_computed_channels_last():
    x = torch.randn(2, 3, 5, 4)
    gm = _traced(_both_layouts, x)
    want = gm(x)
    channels_last_pointwise(gm)
    relus = [args for op, args in _ops(gm) if op is aten.relu.default]
    assert len(relus) == 1
    src = relus[0][0]
    assert src.target is aten.permute.default and list(src.args[1]) == [0, 2, 3, 1]
    assert relus[0][0].meta["val"].shape == (2, 5, 4, 3)
    got = gm(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def test_left_alone_when_read_only_one_way_or_not_pointwise():
    x = torch.randn(2, 3, 5, 4)
    only_last = _traced(lambda x: torch.relu(x).permute(0, 2, 3, 1).contiguous(), x)
    only_first = _traced(lambda x: torch.relu(x) + 1, x)
    softmax = _traced(lambda x: (lambda y: (y.permute(0, 2, 3, 1).sum(3), y * 2))(
        torch.softmax(x, 1)), x)
    two_inputs = _traced(lambda x, b: (lambda y: (y.permute(0, 2, 3, 1).sum(3), y * 2))(
        x + b), x, x)
    for gm in (only_last, only_first, softmax, two_inputs):
        before = _ops(gm)
        channels_last_pointwise(gm)
        assert _ops(gm) == before
