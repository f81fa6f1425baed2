"""``lm.compile_train_step`` over batches of many lengths
(``frontends/train_step_sizes.py``): once two recordings at two lengths
agree but for their sizes (and a third confirms), a batch of a new length
replays on the size family's module with dynamic dimensions instead of
recording again, with eager's losses and parameters; an index out of range
at a new length still raises; ``dynamic=False`` records at every length."""
import copy

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm

VOCAB, WIDTH = 43, 20  # (sizes of this test's own: no module of another test is reused)


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.pos = torch.nn.Embedding(64, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.out = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, ids):
        t = ids.shape[1]  # (arange(t): a host constant made again at each length)
        h = self.embed(ids) + self.pos(torch.arange(t, device=ids.device))
        return self.out(torch.tanh(self.mix(h)))


def loss_fn(logits, ids):
    return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))


def _counts(before: dict) -> dict:
    names = ("TrainStepRecorded", "TrainStepReplayed", "TrainStepNewSize", "UncachedCompile",
             "DynamicShapeCompile")
    return {n: lm.metrics.counter_value(n) - before.get(n, 0) for n in names}


def _train(lengths, dynamic=True):
    """(lazy losses, eager losses, lazy model, eager model, counter deltas)."""
    torch.manual_seed(0)
    eager = TinyLM()
    model = copy.deepcopy(eager).to("lazy")
    eopt = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = lm.compile_train_step(model, loss_fn, opt, dynamic=dynamic)
    g = torch.Generator().manual_seed(1)
    before = {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}
    got, want = [], []
    for t in lengths:
        ids = torch.randint(0, VOCAB, (3, t), generator=g)
        got.append(step(ids.to("lazy"), ids.to("lazy")).item())
        eopt.zero_grad(set_to_none=True)
        loss = loss_fn(eager(ids), ids)
        loss.backward()
        eopt.step()
        want.append(loss.item())
    return got, want, model, eager, step, _counts(before)


def test_new_lengths_replay_the_recorded_step(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    lengths = (9, 13, 9, 17, 13, 21, 11, 17)  # 5 lengths, 8 steps
    got, want, model, eager, step, counts = _train(lengths)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    for a, b in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)
    # recorded: 9 (the optimizer's first step), 13, 9 (agree but for sizes),
    # 17 (a third size confirms); then 21 and 11 replay on the dynamic module
    # without recording
    assert counts["TrainStepRecorded"] == 4 and counts["TrainStepReplayed"] == 4
    assert counts["TrainStepNewSize"] == 2
    assert counts["UncachedCompile"] == 3 and counts["DynamicShapeCompile"] == 1

    # an index out of range at a length never seen raises, as in the plain step
    bad = torch.randint(0, VOCAB, (3, 15))
    bad[1, 4] = VOCAB
    before = _counts({})
    with pytest.raises(IndexError, match=r"embedding.*\[0, 43\)"):
        step(bad.to("lazy"), bad.to("lazy")).item()
    assert _counts(before)["TrainStepNewSize"] == 1  # (replayed, not recorded)
    with pytest.raises(IndexError):  # the next sync point reports it once
        lm.wait_device_ops()


def test_dynamic_false_records_at_every_length(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    got, want, *_, counts = _train((9, 13, 9, 17), dynamic=False)  # (the modules above)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)
    assert counts["TrainStepRecorded"] == 4 and counts["TrainStepNewSize"] == 0
