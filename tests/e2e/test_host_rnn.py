"""LSTM layers of cpu modules run by PyTorch's oneDNN LSTM kernels
(host_calls/passes/rnn.py, host_calls/runtime/rnn.py): a looped LSTM language model
trains as eager does, with the calls and without them (``LAZY_MLIR_RNN=0``),
multi-layer and bidirectional, every gradient as eager's, no op run eagerly."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lazy_mlir as lm
from lazy_mlir import metrics
from lazy_mlir.ops import rnn as rnn_ops
from lazy_mlir.host_calls.runtime import rnn as runtime_rnn

from e2e_helpers import Counters

STEPS, BATCH, VOCAB, HIDDEN = 70, 3, 11, 8   # over ops.rnn.UNROLL_STEPS: loops


class _LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.lstm = nn.LSTM(HIDDEN, HIDDEN, 2, batch_first=True, bidirectional=True)
        self.plain = nn.LSTM(2 * HIDDEN, HIDDEN, 1, bias=False)  # time-major, no biases
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, ids):
        out, (h, c) = self.lstm(self.embed(ids))
        out, _ = self.plain(out.transpose(0, 1))
        return self.head(out.transpose(0, 1)), (h * c).sum()


def _train(device: str, steps: int = 3):
    torch.manual_seed(0)
    model = _LM().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(1)
    losses, grads = [], []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (BATCH, STEPS), generator=g)
        opt.zero_grad()
        logits, extra = model(ids.to(device))
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                           ids.roll(1, 1).reshape(-1).to(device)) + 0.01 * extra
        loss.backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return losses, [g.cpu() for g in grads]


# The looped lowering trains like eager in CI through test_lstm_node; this
# model's looped compile (39 s on 2 cores) runs with the slow tests.
@pytest.mark.parametrize("rnn", ["1", pytest.param("0", marks=pytest.mark.slow)],
                         ids=["calls", "loops"])
def test_lstm_lm_trains_like_eager_with_and_without_calls(monkeypatch, rnn):
    assert not rnn_ops.unrolled(STEPS, 1, 1)  # (the premise: looped, so eligible)
    monkeypatch.setenv("LAZY_MLIR_RNN", rnn)
    c = Counters()
    lazy_losses, lazy_grads = _train("lazy")
    eager_losses, eager_grads = _train("cpu")
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses),
                               rtol=1e-5, atol=1e-6)
    for got, want in zip(lazy_grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    eager_ops = [n for n in metrics.counter_names() if n.startswith("aten::") and c.delta(n)]
    assert not eager_ops, eager_ops
    calls = c.delta("HostRnnCall")
    if rnn == "1":  # per step: 2 layers x 2 directions + 1, forward and backward
        assert calls == 3 * 2 * 5
    else:
        assert calls == 0


def _small_lstm_pair():
    """A 1-layer LSTM(4 -> 5) on the CPU and the same weights on the lazy device."""
    torch.manual_seed(0)
    eager = nn.LSTM(4, 5, 1)
    model = nn.LSTM(4, 5, 1)
    model.load_state_dict(eager.state_dict())
    return eager, model.to("lazy")


def test_inference_lstms_call_onednn_and_unrolled_ones_keep_their_graphs(monkeypatch):
    """No gradient: the forward node alone, with room for a workspace, so a
    looped recurrence is one oneDNN call (as loops, the evaluation graph of
    PyTorch's word-language-model example, 5 batches, failed in iree-compile
    beside a host matmul and ran eagerly); a short (unrolled) recurrence: no
    call."""
    monkeypatch.setenv("LAZY_MLIR_RNN", "1")
    eager, model = _small_lstm_pair()
    for steps, calls in ((3, 0), (80, 1)):  # unrolled, looped
        c = Counters()
        x = torch.randn(steps, 2, 4)
        with torch.no_grad():
            want = eager(x)
            got = model(x.to("lazy"))
            lm.mark_step()  # (one graph for the three results)
            got = (got[0].cpu(), got[1][0].cpu(), got[1][1].cpu())
        torch.testing.assert_close(got, (want[0], *want[1]), rtol=1e-5, atol=1e-6)
        assert c.delta("HostRnnCall") == calls


def test_an_exported_training_step_never_imports_the_rnn_module(tmp_path, monkeypatch):
    """Export compiles with the config as given, host calls forced off: the
    LSTM's node is recorded with room for a workspace (cpu target) and
    lowered to loops all the same."""
    from lazy_mlir.config import PipelineConfig
    from lazy_mlir.host_calls.runtime.switches import session_config
    from lazy_mlir.host_calls.runtime.rnn import imports_rnn
    from lazy_mlir.targets import get_target
    assert session_config(get_target("cpu"), PipelineConfig()).host_rnn
    monkeypatch.setenv("LAZY_MLIR_RNN", "1")
    torch.manual_seed(0)
    model = nn.LSTM(4, 5, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(70, 2, 4), torch.randn(70, 2, 5)
    path = lm.export_train_step(model, lambda out, y: ((out[0] - y) ** 2).mean(), opt, (x, y),
                                path=tmp_path / "step", config=PipelineConfig(host_rnn=True))
    vmfb = b"".join(p.read_bytes() for p in path.rglob("*.vmfb"))
    assert vmfb and not imports_rnn(vmfb)


def test_a_sync_between_forward_and_backward_passes_the_workspace_between_graphs(monkeypatch):
    """``mark_step()`` before ``backward()``: the forward's graph outputs
    oneDNN's workspace (a live saved tensor), the backward's graph reads it;
    gradients as eager's, one call each."""
    monkeypatch.setenv("LAZY_MLIR_RNN", "1")
    eager, model = _small_lstm_pair()
    x = torch.randn(70, 2, 4)
    c = Counters()
    grads = []
    for m, dev in ((eager, "cpu"), (model, "lazy")):
        loss = m(x.to(dev))[0].tanh().sum()
        if dev == "lazy":
            lm.mark_step()  # (the forward runs alone)
        loss.backward()
        if dev == "lazy":
            lm.mark_step()
        grads.append([p.grad.cpu() for p in m.parameters()])
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert c.delta("HostRnnCall") == 2
    del loss
    assert not runtime_rnn.live_workspaces()  # (the forward graph's output went with it)


@pytest.mark.parametrize("compiled", ["forward", "backward"])
def test_a_graph_run_eagerly_while_compiling_matches_a_compiled_one(monkeypatch, compiled):
    """A sync between forward and backward, one of the two graphs compiled and
    the other run eagerly while its module compiles (the default background
    compiles): the node's CPU kernels save what the host calls do, so the
    two graphs agree (before: NaN gradients, or a refused workspace)."""
    from lazy_mlir.compile_service import compile_pool
    monkeypatch.setenv("LAZY_MLIR_RNN", "1")
    monkeypatch.setenv("LAZY_MLIR_CACHE", "0")  # (a miss, whatever ran before)
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")  # (background compiles need one)
    compile_pool.reset()
    try:
        _one_graph_eager(monkeypatch, compiled)
    finally:
        monkeypatch.undo()
        compile_pool.reset()


def _one_graph_eager(monkeypatch, compiled):
    eager, model = _small_lstm_pair()
    x = torch.randn(72 if compiled == "forward" else 73, 3, 4)  # (shapes no other test uses)
    want = torch.autograd.grad(eager(x)[0].tanh().sum(), list(eager.parameters()))
    c = Counters()
    mode = {"forward": "wait", "backward": "background"}
    monkeypatch.setenv("LAZY_MLIR_COMPILE", mode[compiled])
    loss = model(x.to("lazy"))[0].tanh().sum()
    lm.mark_step()
    monkeypatch.setenv("LAZY_MLIR_COMPILE", mode["forward" if compiled == "backward" else
                                                  "backward"])
    got = torch.autograd.grad(loss, list(model.parameters()))
    lm.mark_step()
    assert c.delta("EagerWhileCompiling") == 1
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)


def test_workspaces_live_as_long_as_iree_holds_them(monkeypatch):
    """oneDNN's workspaces go to IREE as they are (DLPack, no copy) and are
    freed when IREE drops them: none outlives a step, whether the backward
    ran in the step's graph, in a later graph, or never (a forward with grad
    whose graph is dropped); process memory stays flat over steps."""
    import gc
    monkeypatch.setenv("LAZY_MLIR_RNN", "1")
    gc.collect()
    lm.wait_device_ops()
    start = runtime_rnn.live_workspaces()  # (earlier tests' graphs may still hold some)

    def live():
        return runtime_rnn.live_workspaces() - start

    _, model = _small_lstm_pair()
    x = torch.randn(70, 2, 4).to("lazy")

    def step():
        model.zero_grad()
        model(x)[0].tanh().sum().backward()
        lm.mark_step()
        lm.wait_device_ops()

    for _ in range(3):
        step()
        assert not live()
    loss = model(x)[0].sum()
    lm.mark_step()  # (the forward alone: its graph outputs the workspace)
    lm.wait_device_ops()
    assert live() == 1
    del loss
    gc.collect()
    assert not live()
    # memory: the workspace of this layer (18 MB) would show if one a step leaked
    big = nn.LSTM(64, 256, 1).to("lazy")
    xb = torch.randn(70, 16, 64).to("lazy")

    def big_step():
        big.zero_grad()
        big(xb)[0].sum().backward()
        lm.mark_step()
        lm.wait_device_ops()
        assert not live()

    for _ in range(3):
        big_step()
    before = _rss_mib()
    for _ in range(20):
        big_step()
    assert _rss_mib() - before < 20, (before, _rss_mib())


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20
