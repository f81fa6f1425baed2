"""F.ctc_loss compiles, forward and backward, with eager's loss and gradient
(``lazy/ctc.py``, ``ops/ctc.py``): padded, concatenated and list-given
targets and lengths, each reduction, empty targets, impossible alignments
with and without zero_infinity; a batch with other lengths reuses the
compiled graph; a long input runs the recursions as loops."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import Counters

N, C, S = 3, 6, 4


def _batch(steps, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(steps, N, C, generator=g), torch.randint(1, C, (N, S), generator=g)


def _loss_and_grad(device, logits, targets, il, tl, reduction="mean", zero_infinity=False):
    x = logits.clone().to(device).detach().requires_grad_()
    moved = [t.to(device) if isinstance(t, torch.Tensor) else t for t in (targets, il, tl)]
    loss = F.ctc_loss(x.log_softmax(-1), *moved, reduction=reduction,
                      zero_infinity=zero_infinity)
    loss.sum().backward()
    return loss.detach().cpu(), x.grad.cpu()


def _compiled_as_eager(logits, targets, il, tl, **kw):
    c = Counters()
    expected = _loss_and_grad("cpu", logits, targets, il, tl, **kw)
    actual = _loss_and_grad("lazy", logits, targets, il, tl, **kw)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert not c.fell_back() and not c.delta("ctc_unfused::denied"), c.fell_back()
    assert c.delta("lazy::ctc_loss") == 1


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_compiles_with_eagers_loss_and_gradient(reduction):
    logits, targets = _batch(12)
    il, tl = torch.tensor([12, 10, 9]), torch.tensor([4, 3, 0])  # (an empty target)
    _compiled_as_eager(logits, targets, il, tl, reduction=reduction)


def test_concatenated_targets_and_lengths_given_as_lists():
    logits, targets = _batch(12, seed=1)
    flat = torch.cat([targets[0, :2], targets[1, :4], targets[2, :1]])
    _compiled_as_eager(logits, flat, [12, 11, 7], [2, 4, 1])


def test_concatenated_targets_computed_on_the_device():
    logits, targets = _batch(12, seed=5)
    flat = torch.cat([targets[0, :3], targets[1, :1], targets[2, :4]])
    il, tl = torch.tensor([12, 9, 12]), torch.tensor([3, 1, 4])
    expected = _loss_and_grad("cpu", logits, flat, il, tl)
    c = Counters()
    x = logits.clone().to("lazy").requires_grad_()
    loss = F.ctc_loss(x.log_softmax(-1), flat.to("lazy") * 1, il.to("lazy") * 1,
                      tl.to("lazy") * 1)
    loss.backward()
    torch.testing.assert_close(loss.detach().cpu(), expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad.cpu(), expected[1], rtol=1e-5, atol=1e-5)
    assert not c.fell_back() and c.delta("lazy::ctc_loss") == 1


@pytest.mark.parametrize("il,tl,flat", [([12, 13, 9], [2, 2, 2], False),  # longer than T
                                        ([12, 12, 9], [2, 5, 2], False),  # longer than S
                                        ([12, 12, 9], [2, 2, 2], True)])  # 6 for 5 targets
def test_lengths_eager_refuses_raise_its_error(il, tl, flat):
    logits, targets = _batch(12, seed=6)
    if flat:
        targets = targets.reshape(-1)[:5]
    with pytest.raises(RuntimeError) as eager:
        _loss_and_grad("cpu", logits, targets, torch.tensor(il), torch.tensor(tl))
    with pytest.raises(RuntimeError) as ours:
        _loss_and_grad("lazy", logits, targets, torch.tensor(il), torch.tensor(tl))
    assert str(ours.value).split("(")[0] == str(eager.value).split("(")[0]


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_an_impossible_alignment_is_infinite_or_zeroed_as_in_eager(zero_infinity):
    logits, targets = _batch(12, seed=2)
    # 4 labels cannot fit in 2 frames: eager's loss is inf, its gradient NaN unless zeroed
    _compiled_as_eager(logits, targets, torch.tensor([12, 2, 12]), torch.tensor([4, 4, 2]),
                       reduction="none", zero_infinity=zero_infinity)


def test_a_batch_with_other_lengths_runs_the_same_compiled_graph():
    logits, targets = _batch(12, seed=3)
    _loss_and_grad("lazy", logits, targets, torch.tensor([12, 10, 9]), torch.tensor([4, 3, 2]))
    lm.mark_step()
    c = Counters()
    _compiled_as_eager(logits, targets, torch.tensor([11, 12, 8]), torch.tensor([2, 4, 3]))
    assert c.delta("UncachedCompile") == 0


def test_concatenated_host_targets_of_another_total_length_reuse_the_module():
    # transformers' CTC heads: a masked_select of the labels, one length per batch
    logits, targets = _batch(12, seed=8)
    flat = torch.cat([targets[0, :2], targets[1, :3], targets[2, :1]])
    _compiled_as_eager(logits, flat, [12, 11, 9], [2, 3, 1])
    lm.mark_step()
    c = Counters()
    flat = torch.cat([targets[0, :4], targets[1, :2], targets[2, :3]])  # 9 targets, not 6
    _compiled_as_eager(logits, flat, [12, 10, 12], [4, 2, 3])
    assert c.delta("UncachedCompile") == 0


def test_a_long_input_compiles_its_recursions_as_loops():
    logits, targets = _batch(70, seed=4)  # (past ops/ctc.UNROLL_STEPS)
    _compiled_as_eager(logits, targets, torch.tensor([70, 61, 33]), torch.tensor([4, 1, 3]))


class _Transcriber(torch.nn.Module):
    """Per-frame logits and the CTC loss of a batch's transcripts."""

    def __init__(self):
        super().__init__()
        self.out = torch.nn.Linear(8, C)

    def forward(self, x, targets, il, tl):
        return F.ctc_loss(self.out(x).log_softmax(-1), targets, il, tl, zero_infinity=True)


def _transcripts(steps):
    g = torch.Generator().manual_seed(7)
    for _ in range(steps):
        yield (torch.randn(20, N, 8, generator=g), torch.randint(1, C, (N, S), generator=g),
               torch.randint(12, 21, (N,), generator=g), torch.randint(1, S + 1, (N,), generator=g))


def test_compile_train_step_replays_batches_with_other_lengths():
    def train(device, compiled):
        torch.manual_seed(0)
        model = _Transcriber().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        step = lm.compile_train_step(model, opt) if compiled else None
        losses = []
        for batch in _transcripts(6):
            batch = [t.to(device) for t in batch]
            if step is not None:
                loss = step(*batch)
            else:
                opt.zero_grad()
                loss = model(*batch)
                loss.backward()
                opt.step()
            losses.append(loss.item())
        return losses
    expected = train("cpu", False)
    c = Counters()
    torch.testing.assert_close(train("lazy", True), expected, rtol=1e-5, atol=1e-5)
    assert c.delta("TrainStepReplayed") >= 3 and not c.fell_back()
