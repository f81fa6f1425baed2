"""``nn.LSTM`` and ``nn.GRU`` on the lazy device as one node forward and one
backward (``lazy/rnn.py``, ``ops/rnn.py``), against eager PyTorch: outputs,
final states and every gradient; PyTorch's own path for what is not fused;
double backward refused."""
from __future__ import annotations

import copy

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.ops import loops
from lazy_mlir.ops import rnn as rnn_ops
from lazy_mlir.ops import subgraph
from e2e_helpers import Counters

T, B, I, H = 3, 2, 4, 5


class _Zoo(torch.nn.Module):
    """The fused configurations side by side, trained as one graph: batch
    first or not, bidirectional, 2 layers, no bias, projections, initial
    states given (and learned) or not."""

    def __init__(self):
        super().__init__()
        self.lstm_a = torch.nn.LSTM(I, H, 2, batch_first=True, bidirectional=True)
        self.lstm_b = torch.nn.LSTM(I, H, 1, bias=False, proj_size=3)
        self.gru_a = torch.nn.GRU(I, H, 2, batch_first=True, bidirectional=True)
        self.gru_b = torch.nn.GRU(I, H, 1, bias=False)
        self.h0 = torch.nn.Parameter(torch.randn(4, B, H))
        self.c0 = torch.nn.Parameter(torch.randn(4, B, H))
        self.g0 = torch.nn.Parameter(torch.randn(1, B, H))

    def forward(self, x):
        tm = x.transpose(0, 1)
        out_a, (h_a, c_a) = self.lstm_a(x, (self.h0, self.c0))
        out_b, _ = self.lstm_b(tm)
        out_c, h_c = self.gru_a(x)
        _, h_d = self.gru_b(tm, self.g0)
        # every output used, with weights that differ per element
        return (out_a.tanh().sum() + (h_a * c_a).sum() + out_b.pow(2).sum()
                + out_c.sin().sum() + h_c.sum() + h_d.pow(2).sum())


def _rnn_counters(c: Counters) -> dict:
    names = [n for n in lm.metrics.counter_names() if n.startswith(("lazy::lstm", "lazy::gru",
                                                                    "rnn_unfused::", "aten::"))]
    return {n: c.delta(n) for n in names if c.delta(n)}


@pytest.mark.parametrize("limit", [0, pytest.param(10**6, marks=pytest.mark.slow)],
                         ids=["loops", "unrolled"])  # (CI: the loops; unrolled with --runslow)
def test_recorded_as_one_node_each_way_and_trains_like_eager(limit, monkeypatch):
    """One training step (forward, backward, SGD) and an inference forward,
    in one graph: the loss, every gradient, the updated parameters and the
    no-grad output as eager's; with each recurrence a loop or unrolled over
    time (``ops.rnn.UNROLL_STEPS``)."""
    monkeypatch.setattr(rnn_ops, "UNROLL_STEPS", limit)
    torch.manual_seed(0)
    eager = _Zoo()
    model = _Zoo()
    model.load_state_dict(eager.state_dict())
    model = model.to("lazy")
    x, x2 = torch.randn(B, T, I), torch.randn(B, T, I)
    c = Counters()
    results = []
    for m, dev in ((eager, "cpu"), (model, "lazy")):
        loss = m(x.to(dev))
        loss.backward()
        if dev == "lazy":  # forward and backward
            ops = sum(c.delta(n) for n in lm.metrics.counter_names() if n.startswith("lazy::"))
        grads = [p.grad.detach().clone() for p in m.parameters()]  # (no sync here)
        torch.optim.SGD(m.parameters(), lr=0.1).step()
        with torch.no_grad():  # inference: the forward node only
            h = m.lstm_a(x2.to(dev))[1][0]
        results.append((loss, grads, h))
    lm.mark_step()
    (want, want_grads, want_h), (got, got_grads, got_h) = results
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_h.cpu(), want_h, rtol=1e-5, atol=1e-6)
    for p, q in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(q.cpu(), p.detach(), rtol=1e-4, atol=1e-5)
    counts = _rnn_counters(c)
    if c.delta("backward::one_node"):  # the backward is one node (lazy/backward.py) ...
        code = list(subgraph.TEMPLATES.values())[-1].gm.code
        counts["lazy::lstm_backward"] = code.count("lazy_mlir.lstm_backward")  # ... of these
        counts["lazy::gru_backward"] = code.count("lazy_mlir.gru_backward")
    assert counts == {"lazy::lstm": 3, "lazy::lstm_backward": 2, "lazy::gru": 2,
                      "lazy::gru_backward": 2}
    assert ops < 60, ops  # 1,533 with each time step's ops recorded


def test_long_sequences_run_as_loops_over_blocks_of_steps(monkeypatch):
    """From ``loops.NEST_STEPS`` time steps each recurrence is an outer loop
    over blocks of steps around an inner loop (17 steps: 4 blocks of 4 and
    a tail step, ``loops.scan``), data-tiled only outside the loops
    (``passes/data_tiling``): the loss and every gradient as eager's, no op
    run eagerly."""
    steps = 17
    monkeypatch.setattr(rnn_ops, "UNROLL_STEPS", 0)  # loops (the node says so)
    assert loops.block_size(steps) == 4
    torch.manual_seed(1)
    eager = torch.nn.ModuleDict({"lstm": torch.nn.LSTM(I, H, batch_first=True,
                                                       bidirectional=True),
                                 "gru": torch.nn.GRU(I, H)})
    model = torch.nn.ModuleDict({k: type(m)(I, H, **({"batch_first": True, "bidirectional": True}
                                                     if k == "lstm" else {}))
                                 for k, m in eager.items()})
    model.load_state_dict(eager.state_dict())
    model = model.to("lazy")
    x = torch.randn(B, steps, I)
    c = Counters()
    results = []
    for m, dev in ((eager, "cpu"), (model, "lazy")):
        xd = x.to(dev)
        loss = m["lstm"](xd)[0].tanh().sum() + m["gru"](xd.transpose(0, 1))[0].sin().sum()
        loss.backward()
        results.append((loss, [p.grad for p in m.parameters()]))
    lm.mark_step()
    (want, want_grads), (got, got_grads) = results
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)
    assert not [n for n in _rnn_counters(c) if n.startswith("aten::")], _rnn_counters(c)


def test_not_fused_takes_pytorchs_path():
    """What the nodes do not cover goes through PyTorch's decomposition, as
    before; nothing is computed here (the graphs are dropped)."""
    torch.manual_seed(0)
    x = torch.randn(B, T, I).to("lazy")
    c = Counters()
    drop = torch.nn.LSTM(I, H, 2, dropout=0.5, batch_first=True).to("lazy")
    drop(x)
    assert _rnn_counters(c) == {"rnn_unfused::dropout": 1}
    drop.eval()(x)  # no dropout in eval mode: fused
    assert c.delta("lazy::lstm") == 1
    torch.nn.GRU(I, H, batch_first=True).double().to("lazy")(x.double())
    assert c.delta("rnn_unfused::not float32") == 1
    lstm = torch.nn.LSTM(I, H, batch_first=True).to("lazy")
    with torch.inference_mode():  # fused too: the forward node alone
        lstm(x)
    assert c.delta("lazy::lstm") == 2 and c.delta("lazy::lstm_backward") == 0


def test_double_backward_is_refused():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, batch_first=True).to("lazy")
    x = torch.randn(B, T, I).to("lazy").requires_grad_()
    (g,) = torch.autograd.grad(lstm(x)[0].pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        g.sum().backward()


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_layers_that_differ_only_in_layout_each_get_their_backward(kind):
    """Two layers whose saved tensors have the same shapes (batch == time) but
    whose layouts differ: compiled autograd's cache does not tell their
    backwards apart, the one-node backward's templates must (the Function's
    ``_compiled_autograd_key`` carries the layer's configuration)."""
    cls = torch.nn.LSTM if kind == "lstm" else torch.nn.GRU
    x = torch.randn(4, 4, I, generator=torch.Generator().manual_seed(3))
    for batch_first in (False, True, False):
        torch.manual_seed(0)
        layer = cls(I, H, 1, batch_first=batch_first)
        lazy_layer = copy.deepcopy(layer).to("lazy")
        eager_grads = _grads(layer, x)
        lazy_grads = _grads(lazy_layer, x.to("lazy"))
        for e, z in zip(eager_grads, lazy_grads):
            torch.testing.assert_close(z.cpu(), e, rtol=1e-4, atol=1e-4)


def _grads(layer, x):
    x = x.clone().requires_grad_(True)
    out = layer(x)[0]
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
    (out * weights).sum().backward()
    grads = [x.grad] + [p.grad for p in layer.parameters()]
    lm.mark_step()
    return grads
