"""A repeated optimizer update recorded from its last record (``lazy/list_replay.py``):
capturable AdamW's step counters (``_foreach_add_``) and its fused update skip
``record`` from the third step on, and train exactly as eager; a changed
constant or a tensor that became a view is recorded again, the long way."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.lazy import dispatch, foreach, fused_optim, state
from lazy_mlir.ops import support
from e2e_helpers import Counters


def _model(device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                               torch.nn.Linear(6, 2)).to(device)


def _train(device, steps, change=None, records=None):
    """AdamW (capturable on the lazy device) with an LR schedule; ``change(step,
    opt, model)`` runs before each step; ``records`` collects, per step, the
    ops ``record`` was called with from the fused and foreach paths."""
    model = _model(device)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.1,
                            capturable=device == "lazy")
    schedule = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
    g = torch.Generator().manual_seed(1)
    losses = []
    for step in range(steps):
        if change is not None:
            change(step, opt, model)
        if records is not None:
            records.append([])
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        opt.zero_grad()
        loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
        loss.backward()
        opt.step()
        schedule.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    steps_done = [float(opt.state[p]["step"].cpu()) for p in model.parameters()]
    return losses, [p.detach().cpu() for p in model.parameters()], steps_done


@pytest.fixture
def records(monkeypatch):
    """Per step, the ops the fused/foreach paths passed to ``record``; no
    record kept from an earlier test (a dead tensor's id may be reused)."""
    state.list_replays.clear()
    # A signature denied by an earlier test in this process (a fallback test
    # run before this file on the same worker) turns every replay off.
    monkeypatch.setattr(support, "DENIED_SIGNATURES", {})
    calls: list = []

    def counting(func, args, kwargs, bare=False):
        calls[-1].append(str(func))
        return dispatch.record(func, args, kwargs, bare)
    monkeypatch.setattr(fused_optim, "_record", counting)
    monkeypatch.setattr(foreach, "_record", counting)
    return calls


def test_a_repeated_update_skips_record_and_trains_like_eager(records):
    want_losses, want_params, want_steps = _train("cpu", 6)
    c = Counters()
    losses, params, steps = _train("lazy", 6, records=records)
    # The first step records (and the second, what the first could not record
    # from plans kept by an earlier test: a record is kept when made from
    # plans); every later step replays: no call into record at all.
    assert len(records[0]) == 2 and len(records[1]) <= 2, records
    assert records[2:] == [[]] * 4, records
    assert c.delta("lazy::fused_adam") == 6 and c.delta("lazy::_foreach_add") == 6
    assert steps == want_steps == [6.0] * 4  # the counters advance exactly as eager's
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, e in zip(params, want_params):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def _weight_decay_from_step_3(step, opt, model):
    if step == 3:
        opt.param_groups[0]["weight_decay"] = 0.5


def _bias_a_view_from_step_3(step, opt, model):
    """The first bias becomes a view of itself (``t_`` of a 1-d tensor: no
    change of values, a view step on the lazy device)."""
    if step == 3:
        with torch.no_grad():
            model[0].bias.t_()


@pytest.mark.parametrize("change", [_weight_decay_from_step_3, _bias_a_view_from_step_3])
def test_a_changed_fact_is_recorded_again(records, change):
    want_losses, want_params, want_steps = _train("cpu", 5, change)
    losses, params, steps = _train("lazy", 5, change, records)
    assert records[2] == [], records  # replayed before the change
    assert any("fused_adam" in op for op in records[3]), records  # not after it
    assert steps == want_steps
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-6)
    for a, e in zip(params, want_params):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
