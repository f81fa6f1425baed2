"""A result read on the host right after its step is computed by a graph of
its own (``lazy_mlir/lazy/early_outputs.py``): ``mark_step(); loss.item()``
waits for the forward only, the rest of the step runs behind it. Every
test here trains or fails as eager does; the split is forced where a tiny
model's module would be too short to pay (``early_outputs.pays``)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.lazy import early_outputs
from lazy_mlir.lazy.state import early_reads, split_plans
from lazy_mlir.runtime.cache import memory_cache
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
    for table in (early_reads, split_plans):
        table.clear()
    yield
    for table in (early_reads, split_plans):
        table.clear()


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


def _step(model, opt, ids, labels, device):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten())
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


def test_the_read_loss_comes_from_its_own_graph_and_trains_like_eager(split):
    eager, opt_e, lazy, opt_l = _models()
    c = Counters()
    compiles_after_warmup = None
    for i, ((ids, labels), (lids, llabels)) in enumerate(zip(_batches(8), _batches(8, "lazy"))):
        want = _step(eager, opt_e, ids, labels, "cpu").item()
        assert _step(lazy, opt_l, lids, llabels, "lazy").item() == pytest.approx(want, rel=1e-5)
        if i == 4:
            compiles_after_warmup = c.delta("UncachedCompile")
    assert c.delta("SplitPlanned") == 1 and c.delta("SplitLaunch") >= 5
    assert c.delta("UncachedCompile") == compiles_after_warmup  # flat once split
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]
    for pe, pl in zip(eager.parameters(), lazy.parameters()):
        torch.testing.assert_close(pl.detach().cpu(), pe.detach(), rtol=1e-4, atol=1e-5)
    rest = [e for k, e in memory_cache._entries.items() if k[0].endswith(":rest")]
    assert rest and all(e.batch_waits is False for e in rest)  # on the worker thread alone


def test_a_bad_index_in_a_split_step_raises_at_the_read(split):
    _, _, lazy, opt_l = _models()
    batches = _batches(5, "lazy", bad_at=4)
    for ids, labels in batches[:4]:
        _step(lazy, opt_l, ids, labels, "lazy").item()
    ids, labels = batches[4]
    c = Counters()
    loss = _step(lazy, opt_l, ids, labels, "lazy")
    assert c.delta("SplitLaunch") == 1
    with pytest.raises(IndexError, match="out of range"):
        loss.item()
    with pytest.raises(IndexError):  # the next sync point reports it, once
        lm.wait_device_ops()
    lm.wait_device_ops()


def test_reading_the_step_before_splits_nothing(split):
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
    assert c.delta("SplitPlanned") == 0 and c.delta("SplitLaunch") == 0


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
