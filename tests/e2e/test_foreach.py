"""Foreach ops on the lazy device: recorded as per-tensor graph ops
(``lazy/foreach.py``), never run on host copies, and equal to eager."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def _foreach_counters():
    """Counters that would mean a foreach op left the graph: a sync
    (``sync::_foreach_*``) or any eager fallback (``aten::*``)."""
    return {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
            if n.startswith("aten::") or (n.startswith("sync::") and "_foreach" in n)}


def _changed(before):
    now = _foreach_counters()
    return {n: v - before.get(n, 0) for n, v in now.items() if v != before.get(n, 0)}


OPTIMIZERS = {
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01,
                                              foreach=True),
    "adam": lambda p: torch.optim.Adam(p, lr=0.05, foreach=True),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1, foreach=True),
    "sgd_clip": lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9, foreach=True),
}
CLIP = {"sgd_clip": 0.05}  # small enough that the clip scales every step


def _train(device, steps=3):
    """One model per optimizer, trained in lockstep so that each step is one
    graph for all of them (two compiles in all: the first step creates the
    optimizer states)."""
    runs = {}
    for name, make_opt in OPTIMIZERS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                                    torch.nn.Linear(6, 2)).to(device)
        runs[name] = (model, make_opt(model.parameters()))
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        for name, (model, opt) in runs.items():
            opt.zero_grad()
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            loss.backward()
            if name in CLIP:
                torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP[name], foreach=True)
            opt.step()
        if device == "lazy":
            lm.mark_step()
    return {name: [p.detach().cpu() for p in model.parameters()]
            for name, (model, _) in runs.items()}


def test_foreach_optimizers_and_clip_grad_norm_match_eager(monkeypatch):
    """SGD with momentum, Adam, AdamW with foreach=True, and
    clip_grad_norm_(foreach=True): 3 steps equal to eager, with no foreach op
    synced or run eagerly. PyTorch refuses clip_grad_norm_(foreach=True) on
    devices without its foreach kernels (it allows cuda/xpu/mtia/privateuse1/cpu),
    so the test lets it through to run its real foreach code on lazy tensors."""
    import torch.nn.utils.clip_grad as clip_grad
    monkeypatch.setattr(clip_grad, "_device_has_foreach_support", lambda device: True)
    expected = _train("cpu")
    before = _foreach_counters()
    # (Adam's lerp_ is recorded whole, as one lerp node: foreach._record_whole)
    ran = {n: lm.metrics.counter_value(n) for n in ("lazy::_foreach_norm", "lazy::_foreach_lerp")}
    got = _train("lazy")
    assert _changed(before) == {}
    for n, v in ran.items():  # the foreach paths ran (clip's norm, Adam's lerp)
        assert lm.metrics.counter_value(n) > v, n
    for name in OPTIMIZERS:
        for a, e in zip(got[name], expected[name]):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5, msg=name)


def test_foreach_functional_and_in_place_through_a_view():
    """Functional results are new tensors; in-place writes go through a view
    into its base, and a later element sees an earlier element's write."""
    g = torch.Generator().manual_seed(2)
    base, b = torch.randn(3, 4, generator=g), torch.randn(4, generator=g)
    other = [torch.randn(4, generator=g), torch.randn(4, generator=g)]

    def run(base, b, o0, o1):
        row = base[1]  # a view of base
        summed = torch._foreach_add([row, b], [o0, o1], alpha=0.5)
        scaled = torch._foreach_mul([b, row], 3.0)
        torch._foreach_mul_([row, b], [o0, o1])
        torch._foreach_add_([b, row], [row, b])  # row reads the new b
        torch._foreach_mul_([base, b], torch.tensor(0.5))  # a 0-d CPU tensor, as clip does
        return [*summed, *scaled, base, b]

    expected = run(base.clone(), b.clone(), *[o.clone() for o in other])
    before = _foreach_counters()
    got = run(lazy(base), lazy(b), *[lazy(o) for o in other])
    assert _changed(before) == {}
    lm.mark_step()  # one graph for all the outputs
    for a, e in zip(got, expected):
        assert_lazy_close(a, e)


def test_unmapped_foreach_op_falls_back_visibly():
    """``_foreach_powsum`` has no per-tensor aten op: it runs eagerly, counted."""
    xs = [torch.tensor([1.0, -2.0]), torch.tensor([3.0])]
    before = lm.metrics.counter_value("aten::_foreach_powsum")
    got = torch._foreach_powsum([lazy(x) for x in xs], 2)
    assert lm.metrics.counter_value("aten::_foreach_powsum") == before + 1
    for a, e in zip(got, torch._foreach_powsum(xs, 2)):
        assert_lazy_close(a, e)


def test_lazy_per_element_scalars_fall_back_visibly():
    """addcdiv_.Tensor reads one scalar per element from its ``scalars``
    tensor; held on the lazy device, the op runs eagerly (counted) and its
    in-place writes still reach the lazy tensors."""
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(3, generator=g), torch.randn(2, 2, generator=g)]
    t1 = [torch.randn(3, generator=g), torch.randn(2, 2, generator=g)]
    t2 = [torch.rand(3, generator=g) + 1, torch.rand(2, 2, generator=g) + 1]
    scalars = torch.tensor([0.5, -2.0])
    lx = [lazy(x) for x in xs]
    before = lm.metrics.counter_value("aten::_foreach_addcdiv_")
    torch._foreach_addcdiv_(lx, [lazy(t) for t in t1], [lazy(t) for t in t2], lazy(scalars))
    assert lm.metrics.counter_value("aten::_foreach_addcdiv_") == before + 1
    torch._foreach_addcdiv_(xs, t1, t2, scalars)
    for a, e in zip(lx, xs):
        assert_lazy_close(a, e)


def test_ops_writing_arguments_and_returning_nothing_write_back():
    """GradScaler's ``_amp_foreach_non_finite_check_and_unscale_`` returns
    nothing and writes a list and a tensor: it runs eagerly on copies
    (counted), the lazy tensors get the new values, and the device data they
    had before is left unchanged."""
    grads = [torch.tensor([1.0, 2.0]), torch.tensor([[4.0, float("inf")]])]
    lg = [lazy(g) for g in grads]
    kept = lg[0] + 0  # a graph over the old data, computed after the write
    found, inv = torch.zeros(()), torch.tensor(0.5)
    lfound = lazy(found)
    before = lm.metrics.counter_value("aten::_amp_foreach_non_finite_check_and_unscale_")
    torch._amp_foreach_non_finite_check_and_unscale_(lg, lfound, lazy(inv))
    assert lm.metrics.counter_value(
        "aten::_amp_foreach_non_finite_check_and_unscale_") == before + 1
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    for a, e in zip([*lg, lfound], [*grads, found]):
        assert_lazy_close(a, e)
    assert_lazy_close(kept, torch.tensor([1.0, 2.0]))


def test_gradient_clipping_with_foreach_true():
    """``clip_grad_norm_`` / ``clip_grad_value_`` read the foreach device list
    from ``torch.utils._foreach_utils``, which listed no ``lazy``: with
    ``foreach=True`` they raised "can't use the foreach API on lazy tensors"."""
    grads = {}
    for device in ("cpu", "lazy"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).to(device)
        model(torch.randn(5, 3).to(device)).pow(2).sum().backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        torch.nn.utils.clip_grad_value_(model.parameters(), 0.05, foreach=True)
        grads[device] = [norm.cpu()] + [p.grad.cpu() for p in model.parameters()]
    for a, b in zip(grads["lazy"], grads["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make,schedule", [
    (lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
     lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10)),
    (lambda ps: torch.optim.RMSprop(ps, lr=0.01, foreach=True),
     lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))),
], ids=["adamw_one_cycle_momentum", "rmsprop_lambda_lr"])
def test_hyperparameters_a_scheduler_changes_compile_once(make, schedule):
    """Adam's ``lerp`` weight (1 - beta1, which OneCycleLR cycles) and
    RMSprop's ``addcdiv`` value (-lr) were constants of their whole foreach
    node: a new graph was compiled at every step. They are graph inputs now
    (``foreach._record_lifted``), with eager's values."""
    params = {}
    for device in ("cpu", "lazy"):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3).to(device)
        opt = make(model.parameters())
        sched = schedule(opt)
        compiles = []
        for step in range(6):
            g = torch.Generator().manual_seed(step)
            model(torch.randn(5, 4, generator=g).to(device)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            if device == "lazy":
                lm.mark_step()
                compiles.append(lm.metrics.counter_value("UncachedCompile"))
        params[device] = [p.detach().cpu() for p in model.parameters()]
    for a, b in zip(params["lazy"], params["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert compiles[-1] == compiles[2], compiles  # nothing after the first steps
