"""A result read on the host right after its step is computed by a graph of
its own (``lazy_mlir/lazy/early_outputs.py``): ``mark_step(); loss.item()``
waits for the forward only, the rest of the step runs behind it. A step
whose backward is one node is cut before that backward (its forward runs
while the rest is captured); one whose backward runs op by op
(``LAZY_MLIR_BACKWARD=ops``) is split at ``mark_step``. Every test here
trains or fails as eager does; the split is forced where a tiny model's
module would be too short to pay (``early_outputs.pays``)."""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.lazy import early_outputs, sync
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.lazy.state import backward_cuts, cut_graphs, early_reads, split_plans
from lazy_mlir.compile_service import compile_pool, lookup
from lazy_mlir.compile_service.memory_cache import memory_cache
from e2e_helpers import Counters

VOCAB = 40


class TokenModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.hidden = nn.Linear(16, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, ids):
        return self.head(torch.tanh(self.hidden(self.embed(ids))))


@pytest.fixture
def split(monkeypatch):
    """Every module is worth splitting, however short; nothing learned
    before the test (the same graph in another test) is remembered."""
    monkeypatch.setattr(early_outputs, "pays", lambda seconds, capture_seconds: True)
    monkeypatch.delenv("LAZY_MLIR_SPLIT", raising=False)
    for table in (early_reads, split_plans, backward_cuts, cut_graphs):
        table.clear()
    yield
    for table in (early_reads, split_plans, backward_cuts, cut_graphs):
        table.clear()


@pytest.fixture(params=["cut", "split"])
def way(request, split, monkeypatch):
    """Each way a step comes in two: cut before its one-node backward, or
    (its backward op by op) split at mark_step."""
    if request.param == "split":
        monkeypatch.setenv("LAZY_MLIR_BACKWARD", "ops")
    return request.param


def _batches(n, device="cpu", bad_at=None):
    """On the lazy device the token ids are device data with no host copy,
    so the embedding's index check is made in the step's graph."""
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(n):
        ids = torch.randint(0, VOCAB, (4, 8), generator=g)
        if i == bad_at:
            ids[1, 3] = VOCAB + 5
        labels = torch.randint(0, VOCAB, (4, 8), generator=g)
        out.append((ids.to(device) * 1, labels.to(device)) if device == "lazy" else (ids, labels))
    if device == "lazy":
        lm.mark_step()
    return out


def _token_loss(logits, labels):
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _step(model, opt, ids, labels, device, loss_fn=_token_loss):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(ids), labels)
    loss.backward()
    opt.step()
    if device == "lazy":
        lm.mark_step()
    return loss


def _models():
    torch.manual_seed(0)
    eager = TokenModel()
    lazy = TokenModel()
    lazy.load_state_dict(eager.state_dict())
    lazy = lazy.to("lazy")
    return (eager, torch.optim.AdamW(eager.parameters(), lr=1e-2),
            lazy, torch.optim.AdamW(lazy.parameters(), lr=1e-2, capturable=True))


def test_the_read_loss_comes_from_its_own_graph_and_trains_like_eager(way, monkeypatch):
    eager, opt_e, lazy, opt_l = _models()
    runs = _spy_runs(monkeypatch)
    c = Counters()
    compiles_after_warmup = None
    one_core = set()
    for i, ((ids, labels), (lids, llabels)) in enumerate(zip(_batches(8), _batches(8, "lazy"))):
        want = _step(eager, opt_e, ids, labels, "cpu").item()
        loss = _step(lazy, opt_l, lids, llabels, "lazy")
        if way == "cut" and i >= 3:  # the loss, computed by the graph launched first
            # (step 1's read, planned at step 2: step 0 made AdamW's state)
            assert len(runs) == 2 and id(value_of(loss).data) in runs[0][1]
            one_core.update(e.batch_waits for e, _ in runs)
        runs.clear()
        assert loss.item() == pytest.approx(want, rel=1e-5)
        if i == 4:
            compiles_after_warmup = c.delta("UncachedCompile")
    planned = "SplitAtBackward" if way == "cut" else "SplitPlanned"
    assert c.delta(planned) == 1 and c.delta("SplitLaunch") >= 5
    assert c.delta("SplitAtBackward" if way == "split" else "SplitPlanned") == 0
    assert c.delta("UncachedCompile") == compiles_after_warmup  # flat once split
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach(), rtol=1e-4, atol=1e-5)
    if way == "split":
        rest = [e for k, e in memory_cache._entries.items()
                if isinstance(k[0], str) and k[0].endswith(":rest")]  # (other tests' keys)
        assert rest and all(e.batch_waits is False for e in rest)  # on the worker thread alone
    else:
        assert one_core == {False}  # the forward, too, on the worker thread alone
        assert c.delta("backward::one_node") == 8


def test_steps_are_not_cut_while_the_cut_graphs_compile(split, monkeypatch):
    """Compiling in the background: the step that first cuts runs its two new
    graphs eagerly while they compile. The steps after it run the whole
    step's compiled module until both are compiled; then they are cut. (Each
    step ran eagerly while the parts compiled: seconds of a real model's
    training at eager speed or worse, on a core the compile wanted.)"""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")
    monkeypatch.setenv("LAZY_MLIR_CACHE", "0")
    monkeypatch.setenv("LAZY_MLIR_TEST_WORKER_DELAY", "3")  # (the parts' compiles outlast the steps)
    compile_pool.reset()
    memory_cache.clear()
    try:
        eager, opt_e, lazy, opt_l = _models()
        batches = list(zip(_batches(12), _batches(12, "lazy")))
        lookup.wait_for_compiles()
        c, i = Counters(), 0

        def step():
            nonlocal i
            (ids, labels), (lids, llabels) = batches[i]
            want = _step(eager, opt_e, ids, labels, "cpu").item()
            assert _step(lazy, opt_l, lids, llabels, "lazy").item() == pytest.approx(want, rel=1e-5)
            i += 1

        while not c.delta("SplitAtBackward"):  # (each step's graphs compiled before the next)
            step()
            lookup.wait_for_compiles()
            assert i < 6
        c.snapshot()
        for _ in range(4):
            step()
        assert c.delta("SplitLaunch") == 1  # the first cut, whose two graphs...
        assert c.delta("EagerWhileCompiling") == 2  # ...ran eagerly; no step after it did
        lookup.wait_for_compiles()
        c.snapshot()
        step()
        step()
        assert c.delta("SplitLaunch") == 2 and c.delta("EagerWhileCompiling") == 0
        assert c.delta("UncachedCompile") == 0
        assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]
    finally:
        compile_pool.reset()


def _spy_runs(monkeypatch) -> list:
    """(module entry, ids of its outputs' data) of each graph launched."""
    runs = []
    run_entry = sync.run_entry

    def spy(entry, inputs, outputs, checks=(), graph=None):
        runs.append((entry, {id(d) for d in outputs}))
        return run_entry(entry, inputs, outputs, checks, graph)
    monkeypatch.setattr(sync, "run_entry", spy)
    return runs


def test_a_bad_index_in_a_split_step_raises_at_the_read(way):
    _, _, lazy, opt_l = _models()
    batches = _batches(5, "lazy", bad_at=4)
    for ids, labels in batches[:4]:
        _step(lazy, opt_l, ids, labels, "lazy").item()
    ids, labels = batches[4]
    c = Counters()
    with pytest.raises(IndexError, match="out of range"):
        # (cut before its backward, the forward may have run by mark_step,
        # which then raises: the step's first sync point after its run)
        _step(lazy, opt_l, ids, labels, "lazy").item()
    assert c.delta("SplitLaunch") == 1
    if way == "split":
        with pytest.raises(IndexError):  # the next sync point reports it, once
            lm.wait_device_ops()
    else:  # (not again where mark_step reported it; then the step's rest is
        # still pending, and fails when launched, as its forward did)
        with contextlib.suppress(IndexError):
            lm.mark_step()
            lm.wait_device_ops()
    lm.wait_device_ops()


def test_reading_the_step_before_splits_nothing(way):
    """A loss read one step late (after the next step's launch) was not
    waited for by anyone: only reads of the newest launch are learned."""
    _, _, lazy, opt_l = _models()
    c = Counters()
    previous = None
    for ids, labels in _batches(6, "lazy"):
        loss = _step(lazy, opt_l, ids, labels, "lazy")
        if previous is not None:
            assert previous.item() > 0
        previous = loss
    assert c.delta("SplitPlanned") == c.delta("SplitAtBackward") == c.delta("SplitLaunch") == 0


def test_a_step_that_is_all_forward_is_not_split(split):
    _, _, lazy, _ = _models()
    c = Counters()
    for ids, _labels in _batches(4, "lazy"):
        out = lazy(ids).sum()
        lm.mark_step()
        out.item()
    assert c.delta("SplitDeclined") == 1 and c.delta("SplitLaunch") == 0


def test_lazy_mlir_split_0_turns_it_off(split, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_SPLIT", "0")
    _, _, lazy, opt_l = _models()
    c = Counters()
    for ids, labels in _batches(4, "lazy"):
        _step(lazy, opt_l, ids, labels, "lazy").item()
    assert c.delta("SplitLaunch") == 0


def test_compile_train_step_records_a_cut_model_as_one_graph(split):
    """A model whose plain steps are cut before their backward, then handed
    to ``compile_train_step``: its step is still recorded as one graph and
    replayed (``early_outputs.one_graph``), and trains like eager."""
    eager, opt_e, lazy, opt_l = _models()
    c = Counters()
    batches = list(zip(_batches(10), _batches(10, "lazy")))
    for (ids, labels), (lids, llabels) in batches[:5]:
        want = _step(eager, opt_e, ids, labels, "cpu").item()
        assert _step(lazy, opt_l, lids, llabels, "lazy").item() == pytest.approx(want, rel=1e-5)
    assert c.delta("SplitAtBackward") == 1 and c.delta("SplitLaunch") == 2
    step = lm.compile_train_step(lazy, _token_loss, opt_l)
    for (ids, labels), (lids, llabels) in batches[5:]:
        want = _step(eager, opt_e, ids, labels, "cpu").item()
        assert step(lids, llabels).item() == pytest.approx(want, rel=1e-5)
    assert c.delta("SplitLaunch") == 2  # none inside the recordings
    assert c.delta("TrainStepRecorded") == 2 and c.delta("TrainStepReplayed") == 3
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach(), rtol=1e-4, atol=1e-5)


def test_lm_jit_traces_a_cut_backward_into_its_one_graph(split):
    """``lm.jit`` of a function whose backward a plain loop cuts: traced as
    one graph (``early_outputs.one_graph``), the gradient as eager's."""
    eager, opt_e, lazy, opt_l = _models()
    batches = list(zip(_batches(6), _batches(6, "lazy")))
    for (ids, labels), (lids, llabels) in batches[:5]:
        _step(eager, opt_e, ids, labels, "cpu")
        _step(lazy, opt_l, lids, llabels, "lazy").item()
    c = Counters()
    assert c.delta("SplitLaunch") == 0 and backward_cuts

    def loss_and_grad(ids, labels):
        lazy.zero_grad(set_to_none=True)
        loss = _token_loss(lazy(ids), labels)
        loss.backward()
        return loss, lazy.head.weight.grad * 1

    ids, labels = batches[5][0]
    compiled = lm.jit(loss_and_grad).lower(ids, labels).compile()
    assert c.delta("SplitLaunch") == 0
    loss, grad = compiled(ids, labels)
    eager.zero_grad(set_to_none=True)
    want = _token_loss(eager(ids), labels)
    want.backward()
    assert float(loss) == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(grad, eager.head.weight.grad, rtol=1e-4, atol=1e-5)


def test_the_gate_times_the_capture_without_the_wait_for_the_read(monkeypatch):
    """The split pays where the module runs no longer than the step's host
    time; waiting for the previous step's loss (``item()``) is not host time.
    A 512-wide MLP at batch 512: a module of tens of ms, ~2 ms of capture.
    Counted as capture, the wait made every step whose loss is read look
    as long as its module: the medium suite's were cut, on one core."""
    monkeypatch.delenv("LAZY_MLIR_SPLIT", raising=False)
    for table in (early_reads, split_plans, backward_cuts):
        table.clear()
    asked = []
    real = early_outputs.pays
    monkeypatch.setattr(early_outputs, "pays", lambda seconds, capture_seconds: asked.append(
        (seconds, capture_seconds)) or real(seconds, capture_seconds))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.Tanh())
                            for _ in range(4)]).to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    x, y = torch.randn(512, 512).to("lazy"), torch.randn(512, 512).to("lazy")
    c = Counters()
    for _ in range(5):
        _step(model, opt, x, y, "lazy", F.mse_loss).item()
    assert asked and all(capture < seconds / 2 for seconds, capture in asked), asked
    assert c.delta("SplitPlanned") == c.delta("SplitAtBackward") == c.delta("SplitLaunch") == 0
    for table in (early_reads, split_plans, backward_cuts):
        table.clear()


def test_a_split_that_did_not_pay_is_not_made_later(monkeypatch):
    """The timing is judged at two launches of the step's graph; a "no" then
    is final. Asked at every launch, a later "yes" (the timings crossing by
    chance) cut the steps from then on and compiled two graphs long after
    warm-up: the sweep's compiles at the 5th step or later."""
    monkeypatch.delenv("LAZY_MLIR_SPLIT", raising=False)
    for table in (early_reads, split_plans, backward_cuts, cut_graphs):
        table.clear()
    answers = []

    def pays(seconds, capture_seconds):  # no, no, then yes
        answers.append(len(answers) >= 2)
        return answers[-1]
    monkeypatch.setattr(early_outputs, "pays", pays)
    _, _, lazy, opt_l = _models()
    c = Counters()
    compiles = []
    for ids, labels in _batches(7, "lazy"):
        _step(lazy, opt_l, ids, labels, "lazy").item()
        compiles.append(c.delta("UncachedCompile"))
    assert answers == [False, False]
    assert c.delta("SplitNotPaying") == 1
    assert c.delta("SplitAtBackward") == c.delta("SplitLaunch") == 0
    assert compiles[-1] == compiles[1]  # (the first step's graph and the steady one's)
    for table in (early_reads, split_plans, backward_cuts, cut_graphs):
        table.clear()
