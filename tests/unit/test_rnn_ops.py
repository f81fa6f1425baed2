"""The LSTM and GRU nodes' math (``ops/rnn.py``; no compiler): forward and
back-propagation through time against eager ``nn.LSTM``/``nn.GRU`` and
autograd, in float64, for every configuration the lazy device fuses; the
shape functions against the math; and the ops decomposed to aten ops the
way import decomposes them."""
from __future__ import annotations

import itertools

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.ops import loops, rnn
from lazy_mlir.ops.support import decomposition_table, op_is_supported

ops = torch.ops.lazy_mlir
T, B, I, H = 4, 3, 5, 6


def _case(kind, layers, bidirectional, bias, batch_first, proj=0, unroll=False):
    torch.manual_seed(layers * 8 + bidirectional * 4 + bias * 2 + batch_first)
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    extra = {"proj_size": proj} if proj else {}
    m = cls(I, H, layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional,
            **extra).double()
    d = 2 if bidirectional else 1
    x = torch.randn((B, T, I) if batch_first else (T, B, I), dtype=torch.double,
                    requires_grad=True)
    h0 = torch.randn(layers * d, B, proj or H, dtype=torch.double, requires_grad=True)
    c0 = torch.randn(layers * d, B, H, dtype=torch.double, requires_grad=True)
    config = (bias, layers, bidirectional, batch_first, unroll)
    return m, x, h0, c0, list(m._flat_weights), config


CONFIGS = [pytest.param(kind, *c, id=f"{kind}-{c[0]}l-{'bi' if c[1] else 'uni'}-"
                        f"{'bias' if c[2] else 'nobias'}-{'bf' if c[3] else 'tm'}")
           for kind in ("lstm", "gru")
           for c in itertools.product([1, 2], [False, True], [False, True], [False, True])]


# how the recurrence runs: one loop, loops over blocks of steps (``loops.scan``
# nests from NEST_STEPS steps on: lowered here to reach T), unrolled
LAYOUTS = ["loop", "blocks", "unrolled"]


@pytest.fixture
def layout(request, monkeypatch):
    if request.param == "blocks":
        monkeypatch.setattr(loops, "NEST_STEPS", 2)  # T = 4: blocks of 2 steps
    return request.param


@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
@pytest.mark.parametrize("kind,layers,bidirectional,bias,batch_first", CONFIGS)
def test_forward_and_backward_match_eager(kind, layers, bidirectional, bias, batch_first, layout):
    _check(kind, layers, bidirectional, bias, batch_first, unroll=layout == "unrolled")


@pytest.mark.parametrize("layout", LAYOUTS, indirect=True)
@pytest.mark.parametrize("layers,bidirectional", [(1, False), (2, True)])
def test_lstm_projections_match_eager(layers, bidirectional, layout):
    _check("lstm", layers, bidirectional, True, True, proj=3, unroll=layout == "unrolled")


def _check(kind, layers, bidirectional, bias, batch_first, proj=0, unroll=False):
    m, x, h0, c0, params, config = _case(kind, layers, bidirectional, bias, batch_first, proj,
                                         unroll)
    if kind == "lstm":
        out, (hy, cy) = m(x, (h0, c0))
        got = rnn.lstm(x, h0, c0, params, *config)
        want, inputs = [out, hy, cy], [x, h0, c0, *params]
        shapes = rnn._lstm_shapes(x, h0, c0, params, *config)
    else:
        out, hy = m(x, h0)
        got = rnn.gru(x, h0, params, *config)
        want, inputs = [out, hy], [x, h0, *params]
        shapes = rnn._gru_shapes(x, h0, params, *config)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert len(shapes) == len(got)
    for s, g in zip(shapes, got):  # the fake kernel says what the math gives, strides too
        assert (s.shape, s.stride()) == (g.shape, g.stride())
    grads_out = [torch.randn_like(w) for w in want]
    expected = torch.autograd.grad(want, inputs, grads_out)
    with torch.no_grad():
        if kind == "lstm":
            grads = rnn.lstm_backward(*grads_out, x, h0, c0, params, got[3:], *config)
        else:
            grads = rnn.gru_backward(*grads_out, x, h0, params, got[2:], *config)
    assert len(grads) == len(expected)
    for g, e in zip(grads, expected):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("unroll", [False, True], ids=["loop", "unrolled"])
def test_missing_output_gradients_are_zeros(unroll):
    """Autograd passes None for outputs the loss does not use (here h_n and
    c_n): the backward reads them as zeros."""
    m, x, h0, c0, params, config = _case("lstm", 2, True, True, False, unroll=unroll)
    out, _ = m(x, (h0, c0))
    g = torch.randn_like(out)
    expected = torch.autograd.grad(out, [x, h0, c0, *params], g)
    with torch.no_grad():
        got = rnn.lstm(x, h0, c0, params, *config)
        grads = rnn.lstm_backward(g, None, None, x, h0, c0, params, got[3:], *config)
    for a, e in zip(grads, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("unroll", [False, True], ids=["loop", "unrolled"])
def test_ops_decompose_to_supported_aten_ops(unroll):
    """Import's decomposition leaves only aten ops the dialect takes, each
    layer's recurrence a ``while_loop`` (``ops/loops.py``), or none when
    unrolled: no ``lazy_mlir::`` op reaches torch-mlir."""
    table = decomposition_table()
    for name in ("lstm", "lstm_backward", "gru", "gru_backward"):
        assert getattr(ops, name).default in table and op_is_supported(getattr(ops, name).default)
    m, x, h0, c0, params, config = _case("lstm", 2, False, True, True, unroll=unroll)
    x, h0, c0, params = x.float().detach(), h0.float().detach(), c0.float().detach(), [
        p.float().detach() for p in params]

    def step(x, h0, c0, *params):
        out = ops.lstm.default(x, h0, c0, list(params), *config)
        return ops.lstm_backward.default(out[0], None, None, x, h0, c0, list(params),
                                         out[3:], *config)
    gm = make_fx(step, decomposition_table=table, tracing_mode="fake")(x, h0, c0, *params)
    graphs = [gm.graph] + [m.graph for m in gm.children() if isinstance(m, torch.fx.GraphModule)]
    targets = {n.target for g in graphs for n in g.nodes if n.op == "call_function"}
    loops = targets & {torch.ops.higher_order.while_loop}
    if unroll:
        assert not loops and len(graphs) == 1
    else:
        assert loops and len(graphs) == 1 + 2 * 4, "a loop per layer each way, 2 graphs each"
    assert all(getattr(t, "namespace", "aten") == "aten" for t in targets - loops), targets
    assert all(op_is_supported(t) for t in targets if isinstance(t, torch._ops.OpOverload))


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_imported_module_does_not_grow_with_the_sequence(kind):
    """Each layer's recurrence is one loop nest (``loops.scan``: blocks of
    steps in an outer loop): the torch-dialect module of a training step
    (forward and backward, 2 layers, both directions) at 32 and at 128 time
    steps has the same number of ops (only the shapes differ)."""
    from lazy_mlir.dialects.torch_import import import_fx
    table = decomposition_table()

    def module_ops(steps):
        x = torch.randn(steps, B, I)
        h0 = torch.randn(4, B, H)
        rnn_ = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(I, H, 2, bidirectional=True)
        params, config = list(rnn_._flat_weights), (True, 2, True, False, False)

        def step(x, h0, *params):
            if kind == "lstm":
                out = ops.lstm.default(x, h0, h0, list(params), *config)
                return ops.lstm_backward.default(out[0], None, None, x, h0, h0, list(params),
                                                 out[3:], *config)
            out = ops.gru.default(x, h0, list(params), *config)
            return ops.gru_backward.default(out[0], None, x, h0, list(params), out[2:], *config)
        gm = make_fx(step, decomposition_table=table, tracing_mode="fake")(x, h0, *params)
        text = str(import_fx(gm))
        # 2 layers x 2 directions, each way: an outer and an inner loop
        assert text.count("torch.prim.Loop ") == 16
        return sum(1 for line in text.splitlines() if " = torch." in line)
    assert module_ops(32) == module_ops(128)


def test_short_recurrences_are_unrolled_long_ones_loops():
    """``unrolled`` by time steps x layers x directions: the suite's tiny LSTM
    (32 steps, 2 layers) unrolled, the medium one (128 steps, 4 layers) loops;
    the saved packs one per direction and step, or one per direction."""
    assert rnn.unrolled(32, 2, 1) and not rnn.unrolled(128, 4, 1)
    assert rnn.unrolled(rnn.UNROLL_STEPS, 1, 1) and not rnn.unrolled(rnn.UNROLL_STEPS, 1, 2)
    x, h = torch.empty(T, B, I), torch.empty(4, B, H)
    params = list(torch.nn.LSTM(I, H, 2, bidirectional=True)._flat_weights)
    for unroll, packs in ((True, [(B, 5 * H)] * (4 * T)), (False, [(T, B, 5 * H)] * 4)):
        shapes = rnn._lstm_shapes(x, h, h, params, True, 2, True, False, unroll)
        assert [tuple(s.shape) for s in shapes[4:]] == packs
