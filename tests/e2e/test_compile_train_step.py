"""lm.compile_train_step: recorded twice, then replayed as one compiled graph.

Every test compares the replayed training with the same loop in eager
PyTorch (or with the plain lazy step), step by step: losses, parameters,
gradients and optimizer state.
"""
from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.models.seed import digits

X, Y = (t[:64] for t in digits()[:2])
TOL = dict(rtol=1e-4, atol=1e-5)


def _model(dropout: float = 0.0):
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(32, 10))


def _counters() -> dict:
    return {n: lm.metrics.counter_value(n) for n in
            ("TrainStepRecorded", "TrainStepReplayed", "TrainStepPlain", "TrainStepRefused")}


def _delta(before: dict) -> dict:
    return {k: v - before[k] for k, v in _counters().items()}


def _batch(i, batch=16):
    j = (i * batch) % (len(Y) - batch)
    return X[j:j + batch], Y[j:j + batch]


def _run(make_opt, steps, *, on_step=None, batch=16, smaller_last=True, clip=None,
         norms=None):
    """(lazy model, lazy optimizer, eager model, eager optimizer) after
    ``steps`` steps of each, checking every loss on the way. ``clip``: the
    max gradient norm (``norms`` collects eager's norms before clipping)."""
    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt, lopt = make_opt(eager.parameters()), make_opt(lazy.parameters())
    step = lm.compile_train_step(lazy, F.cross_entropy, lopt, max_grad_norm=clip)
    for i in range(steps):
        if on_step:
            on_step(i, eopt, lopt)
        last = smaller_last and i == steps - 1
        x, y = _batch(i, batch // 2 if last else batch)  # a smaller last batch records again
        eopt.zero_grad(set_to_none=True)
        want = F.cross_entropy(eager(x), y)
        want.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(eager.parameters(), clip)
            (norms if norms is not None else []).append(float(norm))
        eopt.step()
        got = step(x.to("lazy"), y.to("lazy"))
        torch.testing.assert_close(got.cpu(), want.detach(), **TOL)
    return lazy, lopt, eager, eopt


def _step_both(eager, eopt, step, i):
    """Batch ``i``: one eager step and one ``step`` call; their losses agree."""
    x, y = _batch(i)
    eopt.zero_grad(set_to_none=True)
    want = F.cross_entropy(eager(x), y)
    want.backward()
    eopt.step()
    torch.testing.assert_close(step(x.to("lazy"), y.to("lazy")).cpu(), want.detach(), **TOL)


def _same_state(lazy, lopt, eager, eopt, tol=TOL):
    for (n, p), q in zip(lazy.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q, **tol, msg=lambda m: f"{n}: {m}")
        torch.testing.assert_close(p.grad.cpu(), q.grad, **tol, msg=lambda m: f"{n}: {m}")
    for p, q in zip(lazy.parameters(), eager.parameters()):
        for k, v in eopt.state[q].items():
            got = lopt.state[p][k]
            torch.testing.assert_close(got.cpu() if isinstance(got, torch.Tensor) else got, v,
                                       **tol, msg=k)


def test_sgd_momentum_is_replayed_and_matches_eager():
    before = _counters()
    # step 1 creates the momentum buffers, 2 and 3 record the same graph, 4-7 replay;
    # the smaller last batch records once more
    state = _run(lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), 8)
    _same_state(*state)
    assert _delta(before) == {"TrainStepRecorded": 4, "TrainStepReplayed": 4,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}


def test_the_state_the_first_step_creates_is_computed_by_its_graph():
    """Adadelta makes its state in the first step: that step's graph computes
    it too, so the next step runs no graph of its own to recompute it from
    the first batch (one graph run per step)."""
    torch.manual_seed(0)
    lazy = _model().to("lazy")
    opt = torch.optim.Adadelta(lazy.parameters(), lr=1.0)
    step = lm.compile_train_step(lazy, F.cross_entropy, opt)
    lm.wait_device_ops()
    for i in range(3):
        x, y = (t.to("lazy") for t in _batch(i))
        runs = lm.metrics.metric_data("ExecuteTime")[0]
        step(x, y).cpu()
        assert lm.metrics.metric_data("ExecuteTime")[0] - runs == 1, i


def test_a_changed_learning_rate_records_again_and_is_used():
    def schedule(i, eopt, lopt):
        if i == 5:
            for o in (eopt, lopt):
                for g in o.param_groups:
                    g["lr"] = 0.01
    before = _counters()
    state = _run(lambda p: torch.optim.Adadelta(p, lr=1.0), 9, on_step=schedule)
    _same_state(*state)
    d = _delta(before)
    # 0-2 record (the first creates the state), 3-4 replay; at 5 the lr changes:
    # 5-6 record, 7 replays; 8 (smaller batch) records
    assert d["TrainStepReplayed"] == 3 and d["TrainStepRefused"] == 0, d
    assert isinstance(state[1].state[next(state[0].parameters())]["step"], torch.Tensor)


def _scheduled(make_sched):
    """An ``on_step`` for ``_run``: a scheduler made for each optimizer,
    stepped after every step as a training loop does."""
    scheds = []

    def on_step(i, eopt, lopt):
        if i == 0:
            scheds.extend(make_sched(o) for o in (eopt, lopt))
        for s in scheds if i else ():
            s.step()
    return on_step


@pytest.mark.parametrize("make_opt, make_sched", [
    (lambda p: torch.optim.AdamW(p, lr=1e-3),  # (cycles the betas too)
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1e-2, total_steps=10)),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1),  # (cycles momentum)
     lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10)),
    (lambda p: torch.optim.Adam(p, lr=1e-2),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda i: 1.0 / (1 + i))),
], ids=["adamw-onecycle", "sgd-onecycle", "adam-lambda"])
def test_a_learning_rate_schedule_stepped_every_step_is_replayed(make_opt, make_sched):
    """A scheduler that changes the learning rate (and the momentum) every
    step: the fused update's values are inputs the replay binds from the
    param groups (``train_step_hyper``), so the step replays with eager's
    values. Each new learning rate recorded again before (never replayed)."""
    before = _counters()
    state = _run(make_opt, 8, on_step=_scheduled(make_sched), smaller_last=False)
    _same_state(*state)
    # 1 records (and makes the state), 2 and 3 record the same graph, 4-8 replay
    assert _delta(before) == {"TrainStepRecorded": 3, "TrainStepReplayed": 5,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}


def test_max_grad_norm_clips_the_gradients_inside_the_replayed_graph():
    """``max_grad_norm``: ``clip_grad_norm_`` between the backward and the
    step, as a training loop writes it; it reads nothing on the host, so
    the clipped step replays, with eager's clipped gradients and state."""
    before, norms = _counters(), []
    state = _run(lambda p: torch.optim.AdamW(p, lr=1e-2), 6, smaller_last=False, clip=0.5,
                 norms=norms)
    assert min(norms) > 0.5  # (every step clipped)
    _same_state(*state)
    assert _delta(before) == {"TrainStepRecorded": 3, "TrainStepReplayed": 3,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}
    with pytest.raises(ValueError, match="max_grad_norm must be a positive number"):
        lm.compile_train_step(state[0], F.cross_entropy, state[1], max_grad_norm=-1.0)


class _Heads(nn.Module):
    """A model whose output is a structure: a dict of logits and a tuple
    (features, a number), or an object a replay cannot rebuild."""

    def __init__(self, opaque=False):
        super().__init__()
        self.body, self.opaque = _model(), opaque

    def forward(self, x):
        logits = self.body(x)
        aux = (logits.abs().mean(1), 3) if not self.opaque else logging.LogRecord
        return {"logits": logits, "aux": aux}


def _loss_of_heads(out, y):
    return F.cross_entropy(out["logits"], y)


def test_return_outputs_gives_each_steps_outputs_recorded_and_replayed():
    """``return_outputs``: ``(loss, outputs)``, the model's outputs detached,
    the values eager computes, in the same structure, at every step
    (recorded or replayed: the replayed graph computes them too)."""
    eager = _Heads()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt, lopt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (eager, lazy))
    step = lm.compile_train_step(lazy, _loss_of_heads, lopt, return_outputs=True)
    before = _counters()
    for i in range(6):
        x, y = _batch(i)
        eopt.zero_grad(set_to_none=True)
        want = eager(x)
        _loss_of_heads(want, y).backward()
        eopt.step()
        loss, got = step(x.to("lazy"), y.to("lazy"))
        assert got["aux"][1] == 3 and not got["logits"].requires_grad
        torch.testing.assert_close(got["logits"].cpu(), want["logits"].detach(), **TOL)
        torch.testing.assert_close(got["aux"][0].cpu(), want["aux"][0].detach(), **TOL)
        torch.testing.assert_close(loss.cpu(), _loss_of_heads(want, y).detach(), **TOL)
    # 1 makes the momentum buffers, 2 and 3 record the same graph, 4-6 replay
    assert _delta(before) == {"TrainStepRecorded": 3, "TrainStepReplayed": 3,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}


def test_return_outputs_that_cannot_be_rebuilt_run_plain_and_say_why(caplog):
    lazy = _Heads(opaque=True).to("lazy")
    opt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    step = lm.compile_train_step(lazy, _loss_of_heads, opt, return_outputs=True)
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        for i in range(3):
            x, y = (t.to("lazy") for t in _batch(i))
            _, out = step(x, y)
            assert out["aux"] is logging.LogRecord and out["logits"].shape == (16, 10)
    assert "return_outputs: the model's output holds a type" in caplog.text


class _DecayingSGD(torch.optim.SGD):
    """A subclass whose ``step`` reads ``group["lr"]`` itself: the value is
    a constant of its recording, so a new one must record again."""

    @torch.no_grad()
    def step(self, closure=None):
        super().step(closure)
        for g in self.param_groups:
            for p in g["params"]:
                p.mul_(1.0 - g["lr"])


def test_a_subclass_whose_step_reads_the_learning_rate_records_again():
    def schedule(i, eopt, lopt):
        for o in (eopt, lopt):
            for g in o.param_groups:
                g["lr"] = 0.1 if i < 5 else 0.02
    before = _counters()
    state = _run(lambda p: _DecayingSGD(p, lr=0.1, momentum=0.9), 9, on_step=schedule,
                 smaller_last=False)
    _same_state(*state)
    # 0-2 record, 3-4 replay; at 5 the lr changes: 5-6 record, 7-8 replay
    assert _delta(before)["TrainStepReplayed"] == 4


def test_adam_reads_its_step_count_on_the_host_and_runs_plain(caplog):
    """Adam's foreach path with ``capturable=False`` reads its step count on
    the host (its default on lazy parameters is the fused path, below)."""
    before = _counters()
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        lazy, lopt, eager, eopt = _run(lambda p: torch.optim.Adam(p, lr=1e-2, foreach=True), 4,
                                       smaller_last=False)
    _same_state(lazy, lopt, eager, eopt)
    d = _delta(before)
    # 1 records (and makes the state), 2 reads the lazy step count: refused, 3-4 plain
    assert d == {"TrainStepRecorded": 1, "TrainStepReplayed": 0, "TrainStepPlain": 2,
                 "TrainStepRefused": 1}, d
    assert "_local_scalar_dense" in caplog.text and "capturable=True" in caplog.text
    # the step counts went back to the CPU, where Adam reads them without a sync
    assert next(iter(lopt.state.values()))["step"].device.type == "cpu"


def test_a_step_with_an_eager_op_says_so_without_blaming_the_optimizer(caplog):
    """A loss whose op runs eagerly (a data-dependent shape) refuses the
    recording with that op named; the default Adam (fused on the lazy
    device: no host read) is not told to be capturable (it was, whatever
    the cause: a GNN script's bincount and bool-mask index)."""
    model = _model()
    lazy = copy.deepcopy(model).to("lazy")
    opt = torch.optim.Adam(lazy.parameters(), lr=1e-2)

    def loss_fn(out, y):
        return F.cross_entropy(out[y >= 0], y[y >= 0])  # a bool-mask index: runs eagerly
    step = lm.compile_train_step(lazy, loss_fn, opt)
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        for i in range(2):
            x, y = _batch(i)
            step(x.to("lazy"), y.to("lazy"))
    assert "runs ops eagerly (index" in caplog.text, caplog.text
    assert "capturable" not in caplog.text


def test_a_refused_step_under_a_schedule_is_refused_once(caplog):
    """A step refused (an op runs eagerly) stays refused when only a
    hyperparameter's value changes: a scheduler's new learning rate each
    step recorded the step again, was refused again and warned again."""
    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt, lopt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, lazy))
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda i: 1.0 / (1 + i)) for o in (eopt, lopt)]

    def loss_fn(out, y):
        return F.cross_entropy(out[y >= 0], y[y >= 0])  # a bool-mask index: runs eagerly
    step = lm.compile_train_step(lazy, loss_fn, lopt)
    before = _counters()
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        for i in range(5):
            x, y = _batch(i)
            eopt.zero_grad(set_to_none=True)
            want = loss_fn(eager(x), y)
            want.backward()
            eopt.step()
            torch.testing.assert_close(step(x.to("lazy"), y.to("lazy")).cpu(), want.detach(), **TOL)
            for s in scheds:
                s.step()
    assert _delta(before) == {"TrainStepRecorded": 0, "TrainStepReplayed": 0,
                              "TrainStepPlain": 4, "TrainStepRefused": 1}
    assert caplog.text.count("runs the plain lazy step") == 1, caplog.text


@pytest.mark.parametrize("opt", ["Adam", pytest.param("AdamW", marks=pytest.mark.slow)])
def test_capturable_adam_is_replayed_and_matches_eager_adam(opt):
    """capturable=True keeps the step count on the lazy device (allowed there
    by lazy/capturable.py): no host read, one graph for every step. Eager
    runs the default (capturable=False) optimizer: the same algorithm."""
    cls = getattr(torch.optim, opt)
    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt = cls(eager.parameters(), lr=1e-2)
    lopt = cls(lazy.parameters(), lr=1e-2, capturable=True)
    step = lm.compile_train_step(lazy, F.cross_entropy, lopt)
    before = _counters()
    for i in range(5):
        _step_both(eager, eopt, step, i)
    # capturable computes the bias corrections in float32 tensors, eager in Python floats
    _same_state(lazy, lopt, eager, eopt, tol=dict(rtol=1e-3, atol=1e-4))
    # 1 makes the state, 2 and 3 record the same graph, 4 and 5 replay
    assert _delta(before) == {"TrainStepRecorded": 3, "TrainStepReplayed": 2,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}
    assert next(iter(lopt.state.values()))["step"].device.type == "lazy"


def test_dropout_draws_new_masks_like_the_plain_lazy_step():
    """Replays draw seeds from the CPU generator as the plain step does: the
    same losses as the plain lazy loop from the same seed, different masks
    every step."""
    def train(compiled):
        model = _model(dropout=0.5).to("lazy")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        step = lm.compile_train_step(model, F.cross_entropy, opt)
        x, y = (t.to("lazy") for t in _batch(0))
        torch.manual_seed(123)
        losses = []
        for _ in range(6):
            if compiled:
                losses.append(step(x, y).item())
            else:
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                lm.mark_step()
                losses.append(loss.item())
        return losses
    before = _counters()
    replayed, plain = train(True), train(False)
    assert _delta(before)["TrainStepReplayed"] == 4
    torch.testing.assert_close(replayed, plain, **TOL)
    assert len(set(round(v, 6) for v in replayed)) == 6


def test_an_out_of_range_target_still_raises_in_a_replay():
    model = _model().to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = lm.compile_train_step(model, F.cross_entropy, opt)
    x, y = (t.to("lazy") for t in _batch(0))
    for _ in range(3):
        step(x, y).item()
    before = _counters()
    bad = torch.full((16,), 12).to("lazy")
    with pytest.raises(IndexError, match=r"nll_loss_forward.*\[0, 10\)"):
        step(x, bad).item()
    assert _delta(before)["TrainStepReplayed"] == 1
    with pytest.raises(IndexError):  # the next sync point reports it once
        lm.wait_device_ops()


def test_a_host_read_in_the_loss_is_refused_and_the_step_still_trains():
    def loss_fn(out, y):
        loss = F.cross_entropy(out, y)
        return loss * 2 if loss.item() > 100 else loss
    model = _model().to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = lm.compile_train_step(model, loss_fn, opt)
    x, y = (t.to("lazy") for t in _batch(0))
    before = _counters()
    losses = [step(x, y).item() for _ in range(4)]
    d = _delta(before)
    assert d["TrainStepRefused"] == 1 and d["TrainStepPlain"] == 3 and d["TrainStepReplayed"] == 0
    assert losses == sorted(losses, reverse=True)


def test_a_host_value_that_changes_every_step_is_refused_and_reset_records_again():
    """A loss scaled by a Python float that changes every call records two
    different graphs' constants: refused, every step plain and still right.
    ``reset()`` forgets the refusal: the next calls record again."""
    calls = [0]

    def loss_fn(out, y):
        calls[0] += 1
        return F.cross_entropy(out, y) * (1.0 + 0.5 * calls[0])

    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.05)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.05)
    step = lm.compile_train_step(lazy, loss_fn, lopt)
    x, y = _batch(0)
    before = _counters()
    for i in range(4):
        eopt.zero_grad(set_to_none=True)
        want = F.cross_entropy(eager(x), y) * (1.0 + 0.5 * (i + 1))
        want.backward()
        eopt.step()
        torch.testing.assert_close(step(x.to("lazy"), y.to("lazy")).cpu(), want.detach(), **TOL)
    assert _delta(before) == {"TrainStepRecorded": 2, "TrainStepReplayed": 0,
                              "TrainStepPlain": 2, "TrainStepRefused": 1}
    step.reset()
    before = _counters()
    step(x.to("lazy"), y.to("lazy")).item()
    assert _delta(before)["TrainStepRecorded"] == 1


def test_tied_weights_and_batch_norm_buffers_are_state_in_torchs_order():
    """The state list reads the modules' own dicts (cheaper than torch's
    generators): a weight two layers share appears once, buffers (BatchNorm's
    running statistics, updated by every training step) follow, both in
    ``parameters()``/``buffers()`` order, and the replay matches eager."""
    def make(device):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.BatchNorm1d(32), nn.ReLU(),
                          nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                          nn.Linear(32, 10))
        m[6].weight = m[4].weight  # stays tied through the move (lazy/module_ties.py)
        return m.to(device)

    eager, lazy = make("cpu"), make("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.05, momentum=0.9)
    step = lm.compile_train_step(lazy, F.cross_entropy, lopt)
    assert [id(p) for p in step._params()] == [id(p) for p in lazy.parameters()]
    assert [id(t) for _, _, t in step._state()][len(step._params()):][:3] == \
        [id(b) for b in lazy.buffers()]
    before = _counters()
    for i in range(6):
        _step_both(eager, eopt, step, i)
    assert _delta(before)["TrainStepReplayed"] == 3
    _same_state(lazy, lopt, eager, eopt)
    for got, want in zip(lazy.buffers(), eager.buffers()):
        torch.testing.assert_close(got.cpu(), want, **TOL)


class _OwnLoss(nn.Module):
    """A model that computes its own loss, as transformers models do: keyword
    inputs, ``labels`` optional, an output with ``.loss`` (or a dict)."""

    def __init__(self, as_dict: bool = False):
        super().__init__()
        self.net = _model()
        self.as_dict = as_dict

    def forward(self, pixels, labels=None, scale: float = 1.0):
        logits = self.net(pixels) * scale
        loss = None if labels is None else F.cross_entropy(logits, labels)
        if self.as_dict:
            return {"loss": loss, "logits": logits}
        return type("Output", (), {"loss": loss, "logits": logits})()


def test_a_model_that_computes_its_own_loss_is_replayed_from_keyword_batches():
    """``compile_train_step(model, optimizer)`` and ``step(**batch)`` (then
    ``step(batch_dict)``): the loss is ``model(**batch).loss``; a non-tensor
    input is passed as given and a new value records again."""
    eager = _OwnLoss()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    step = lm.compile_train_step(lazy, lopt)
    before = _counters()
    for i in range(7):
        x, y = _batch(i)
        scale = 1.0 if i < 5 else 0.5
        eopt.zero_grad(set_to_none=True)
        want = eager(x, labels=y, scale=scale).loss
        want.backward()
        eopt.step()
        batch = {"pixels": x.to("lazy"), "labels": y.to("lazy"), "scale": scale}
        got = step(**batch) if i % 2 else step(batch)
        torch.testing.assert_close(got.cpu(), want.detach(), **TOL)
    _same_state(lazy.net, lopt, eager.net, eopt)
    # 1 makes the momentum, 2-3 record, 4-5 replay; the new scale records 6 and 7
    assert _delta(before) == {"TrainStepRecorded": 5, "TrainStepReplayed": 2,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}


def test_a_keyword_batch_gives_its_labels_to_the_loss_fn():
    """With a ``loss_fn``, the ``target_key`` entry is the target and the rest
    are the model's keyword inputs; a dict output's ``"loss"`` also works."""
    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.1)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.1)
    step = lm.compile_train_step(lazy, F.cross_entropy, lopt, target_key="y")
    before = _counters()
    for i in range(4):
        _, y = _batch(i)
        x = _batch(i)[0]
        eopt.zero_grad(set_to_none=True)
        want = F.cross_entropy(eager(input=x), y)
        want.backward()
        eopt.step()
        got = step(input=x.to("lazy"), y=y.to("lazy"))
        torch.testing.assert_close(got.cpu(), want.detach(), **TOL)
    assert _delta(before)["TrainStepReplayed"] == 2
    own = _OwnLoss(as_dict=True).to("lazy")
    step = lm.compile_train_step(own, torch.optim.SGD(own.parameters(), lr=0.1))
    x, y = _batch(0)
    assert step(pixels=x.to("lazy"), labels=y.to("lazy")).item() > 0


@pytest.mark.parametrize("make_step,call,message", [
    (lambda m, o: lm.compile_train_step(m, F.cross_entropy, o), lambda s, x, y: s(x),
     r"step\(\*inputs, target\)"),
    (lambda m, o: lm.compile_train_step(m, F.cross_entropy, o), lambda s, x, y: s(input=x),
     r"target under 'labels'"),
    (lambda m, o: lm.compile_train_step(m, o), lambda s, x, y: s(x),
     r"must return its loss.*a tensor of shape \(16, 10\)"),
    (lambda m, o: lm.compile_train_step(m, None, None), None,
     r"takes a torch.optim.Optimizer"),
    (lambda m, o: lm.compile_train_step(m, "cross_entropy", o), None,
     r"loss_fn must be callable"),
])
def test_a_call_that_cannot_be_a_training_step_says_how_to_call_it(make_step, call, message):
    model = _model().to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = (t.to("lazy") for t in _batch(0))
    with pytest.raises(TypeError, match=message):
        call(make_step(model, opt), x, y) if call else make_step(model, opt)


def test_adams_default_fused_update_reads_nothing_on_the_host_and_is_replayed():
    """By default Adam takes its fused path on lazy parameters
    (``lazy/fused_optim.py``): its step counts are inputs of the update's one
    node, never read on the host, so the step is replayed although
    ``capturable`` is off."""
    before = _counters()
    state = _run(lambda p: torch.optim.Adam(p, lr=1e-2), 4, smaller_last=False)
    _same_state(*state)
    # 1 records (and makes the state), 2 and 3 record the same graph, 4 replays
    assert _delta(before) == {"TrainStepRecorded": 3, "TrainStepReplayed": 1,
                              "TrainStepPlain": 0, "TrainStepRefused": 0}


def test_a_replay_binds_its_outputs_before_it_launches(monkeypatch):
    """The launch is the last thing a replay does: when it is handed to the
    run thread, the parameters, gradients and optimizer state already name
    the outputs it fills, so ``step(); loss.item()`` reaches the wait at once
    and takes the job itself, as after the plain loop's ``mark_step``
    (launched ~2 ms earlier, GPT-2 medium's replay went to the run thread,
    whose big blocks glibc maps anew each call: 121,000 page faults a step)."""
    from lazy_mlir.frontends import train_step
    from lazy_mlir.lazy.capture import value_of
    seen = []

    def run_entry(entry, inputs, outputs, checks=()):
        out = {id(d) for d in outputs}
        tensors = [p for p in lazy.parameters()] + [p.grad for p in lazy.parameters()]
        tensors += [t for st in lopt.state.values() for t in st.values()
                    if isinstance(t, torch.Tensor)]
        seen.append(all(id(value_of(t).data) in out for t in tensors))
        return real(entry, inputs, outputs, checks)

    real = train_step.run_entry
    monkeypatch.setattr(train_step, "run_entry", run_entry)
    eager = _model()
    lazy = copy.deepcopy(eager).to("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    step = lm.compile_train_step(lazy, F.cross_entropy, lopt)
    before = _counters()
    for i in range(5):
        _step_both(eager, eopt, step, i)
    assert _delta(before)["TrainStepReplayed"] == 2
    assert seen == [True, True]  # (recordings launch through sync.launch, not here)
    _same_state(lazy, lopt, eager, eopt)


def test_an_evaluation_left_pending_beside_a_changing_learning_rate():
    """An evaluation under no_grad kept lazy (read at the end) between
    epochs, and a scheduler's new learning rate: the step records again, and
    its recording must not take the pending evaluation as an output of its
    graph (a read's graph does, ``lazy/read_outputs.py``): its two recordings
    then differed and the step ran plain from then on."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).to("lazy")
    # foreach: its learning rate is not an input of the replay (fused SGD's
    # is, train_step_hyper), so the new one records again
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    step = lm.compile_train_step(model, nn.CrossEntropyLoss(), opt)
    x, y = torch.randn(32, 64).to("lazy"), torch.randint(0, 10, (32,)).to("lazy")
    before = _counters()
    accs = []
    for _ in range(4):
        for _ in range(3):
            step(x, y)
        sched.step()
        with torch.no_grad():
            accs.append((model(x).argmax(-1) == y).sum())
    [a.item() for a in accs]
    after = _counters()
    assert after.get("TrainStepRefused", 0) == before.get("TrainStepRefused", 0)
    assert after.get("TrainStepReplayed", 0) - before.get("TrainStepReplayed", 0) == 4
