"""torch.optim's fused updates on the lazy device: one ``lazy_mlir::fused_adam``
/ ``fused_sgd`` node per call (``lazy/fused_optim.py``), the default for
Adam, AdamW and SGD on lazy parameters, equal to eager PyTorch."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import Counters, assert_lazy_close, lazy

OPTIMIZERS = {  # (name -> make(params, on_lazy))
    "adamw_default": lambda p, on_lazy: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1),
    "adamw_capturable": lambda p, on_lazy: torch.optim.AdamW(p, lr=0.05, weight_decay=0.1,
                                                             capturable=on_lazy),
    "adam_fused_amsgrad_maximize": lambda p, on_lazy: torch.optim.Adam(
        p, lr=0.02, betas=(0.8, 0.99), weight_decay=0.01, amsgrad=True, maximize=True,
        fused=True),
    "sgd_nesterov": lambda p, on_lazy: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True,
                                                       weight_decay=0.01),
    "sgd_plain": lambda p, on_lazy: torch.optim.SGD(p, lr=0.1),
}


def _schedule(name, opt, steps):
    """OneCycleLR, which changes beta1 / the momentum every step as well as
    the learning rate (each step's graph was a new one to compile while they
    were constants); plain SGD (no momentum to cycle): the learning rate
    halved after every step."""
    if name == "sgd_plain":
        return torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps + 1)


def _train(device, steps, counters=None):
    """Every optimizer on its own copy of one model, in lockstep (one graph a
    step for all of them), with a schedule (``_schedule``)."""
    runs = {}
    for name, make in OPTIMIZERS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(),
                                    torch.nn.Linear(6, 2)).to(device)
        opt = make(list(model.parameters()), device == "lazy")
        runs[name] = (model, opt, _schedule(name, opt, steps))
    g = torch.Generator().manual_seed(1)
    losses, compiles = {name: [] for name in runs}, []
    for _ in range(steps):
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        step_losses = {}
        for name, (model, opt, schedule) in runs.items():
            opt.zero_grad()
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
            loss.backward()
            opt.step()
            schedule.step()
            step_losses[name] = loss
        if device == "lazy":
            lm.mark_step()
        for name, loss in step_losses.items():
            losses[name].append(loss.item())
        if counters is not None:
            compiles.append(counters.delta("UncachedCompile"))
    params = {name: [p.detach().cpu() for p in model.parameters()]
              for name, (model, _, _) in runs.items()}
    return losses, params, compiles


def test_optimizers_train_like_eager_with_one_node_per_update():
    """Four steps of Adam/AdamW/SGD (default, capturable, explicit fused with
    AMSGrad and maximize) with schedules: eager's losses and weights, no op
    run eagerly, one fused node per optimizer and step, and no compile after
    the second step although the learning rate, Adam's beta1 and SGD's
    momentum change every step (they are graph inputs)."""
    steps = 4
    want_losses, want_params, _ = _train("cpu", steps)
    c = Counters()
    got_losses, got_params, compiles = _train("lazy", steps, c)
    fallbacks = {n: c.delta(n) for n in lm.metrics.counter_names()
                 if n.startswith("aten::") and c.delta(n)}
    assert fallbacks == {}
    assert c.delta("lazy::fused_adam") == 3 * steps
    assert c.delta("lazy::fused_sgd") == 2 * steps
    assert c.delta("lazy::_foreach_add") == 2 * steps  # (device step counts; host ones for
    # adamw_default are counted up on the host)
    assert compiles[1] == compiles[-1], compiles  # steps 0 and 1 compile, then none
    for name in OPTIMIZERS:
        torch.testing.assert_close(got_losses[name], want_losses[name], rtol=1e-5, atol=1e-6,
                                   msg=name)
        for a, e in zip(got_params[name], want_params[name]):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6, msg=name)


def _adamw_call(params, grads, exp_avgs, exp_avg_sqs, steps, grad_scale, found_inf):
    torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=0.1, beta1=0.9,
                        beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False,
                        grad_scale=grad_scale, found_inf=found_inf)


def test_fused_update_writes_through_views_and_leaves_earlier_reads_alone():
    """A parameter that is a view of a bigger tensor: the write reaches the
    base, as in eager; a value read before the update keeps the old data;
    grad_scale unscales the gradients in place; found_inf = 1 writes nothing."""
    torch.manual_seed(0)
    host = {"base": torch.randn(3, 4), "p1": torch.randn(5), "g0": torch.randn(4),
            "g1": torch.randn(5), "m0": torch.zeros(4), "m1": torch.zeros(5),
            "v0": torch.zeros(4), "v1": torch.zeros(5)}
    for device in ("cpu", "lazy"):
        t = {k: (lazy(v) if device == "lazy" else v.clone()) for k, v in host.items()}
        params = [t["base"][1], t["p1"]]  # a row of base: a view
        kept = t["p1"] * 1
        steps = [torch.tensor(1.0).to(device), torch.tensor(1.0).to(device)]
        scale, found = torch.tensor(4.0).to(device), torch.tensor(0.0).to(device)
        grads = [t["g0"], t["g1"]]
        _adamw_call(params, grads, [t["m0"], t["m1"]], [t["v0"], t["v1"]], steps, scale, found)
        after_one = {k: v.clone() for k, v in t.items()}
        _adamw_call(params, grads, [t["m0"], t["m1"]], [t["v0"], t["v1"]], steps, scale,
                    torch.tensor(1.0).to(device))  # skipped: found_inf
        if device == "cpu":
            want, want_kept, want_one = t, kept, after_one
            continue
        c = Counters()
        for k in host:
            assert_lazy_close(t[k], want[k], rtol=1e-6, atol=1e-7)
            assert_lazy_close(after_one[k], want_one[k], rtol=1e-6, atol=1e-7)
        assert_lazy_close(kept, want_kept)
        assert not any(n.startswith("aten::") and c.delta(n) for n in lm.metrics.counter_names())
    torch.testing.assert_close(want["g0"], host["g0"] / 4)  # (eager unscaled them in place)


def test_calls_that_cannot_be_one_node_run_eagerly_and_visibly():
    """A gradient on the host (not all lazy), or two written lists holding one
    tensor (the node's outputs would write one storage twice): PyTorch's
    kernel runs on host copies, counted as a fallback, and the lazy tensors
    get its results."""
    p, g = torch.randn(3), torch.randn(3)
    kw = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False,
              maximize=False)
    want_p, want_m, want_v = p.clone(), torch.zeros(3), torch.zeros(3)
    torch._fused_adam_([want_p], [g.clone()], [want_m], [want_v], [], [torch.tensor(1.0)], **kw)
    lp, lm_, lv = lazy(p), lazy(torch.zeros(3)), lazy(torch.zeros(3))
    c = Counters()
    torch._fused_adam_([lp], [g.clone()], [lm_], [lv], [], [lazy(torch.tensor(1.0))], **kw)
    assert c.delta("aten::_fused_adam_") == 1
    for a, e in ((lp, want_p), (lm_, want_m), (lv, want_v)):
        assert_lazy_close(a, e)
    shared = lazy(torch.zeros(3))
    torch._fused_adam_([lazy(p)], [lazy(g)], [shared], [shared], [], [lazy(torch.tensor(1.0))],
                       **kw)
    assert c.delta("aten::_fused_adam_") == 2


class _WithAnEmptyLayer(torch.nn.Module):
    """A zero-sized layer beside a real one (MobileBERT's tiny config has one)."""

    def __init__(self):
        super().__init__()
        self.real, self.empty = torch.nn.Linear(4, 2), torch.nn.Linear(4, 0)

    def forward(self, x):
        return torch.cat([self.real(x), self.empty(x)], -1)


def _train_with_an_empty_layer(device, make_opt, steps=3):
    torch.manual_seed(0)
    model = _WithAnEmptyLayer().to(device)
    opt = make_opt(model.parameters())
    g = torch.Generator().manual_seed(2)
    for _ in range(steps):
        x, y = torch.randn(5, 4, generator=g), torch.randn(5, 2, generator=g)
        opt.zero_grad()
        ((model(x.to(device)) - y.to(device)) ** 2).mean().backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
    return [p.detach().cpu() for p in model.parameters()]


def test_an_empty_parameter_leaves_the_update_one_node():
    """A parameter with no elements has nothing to update: it is left out of
    the fused call rather than sending the whole update to run eagerly on
    host copies (capture refuses a non-empty result made from an empty
    input; the MobileBERT sweep entry read every parameter back each step)."""
    for make in (lambda p: torch.optim.AdamW(p, lr=0.05),
                 lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)):
        want = _train_with_an_empty_layer("cpu", make)
        c = Counters()
        got = _train_with_an_empty_layer("lazy", make)
        assert c.fell_back() == []
        assert c.delta("lazy::fused_adam") + c.delta("lazy::fused_sgd") == 3
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
