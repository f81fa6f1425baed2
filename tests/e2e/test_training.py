"""The seeds' training loops on the lazy device, compared with eager PyTorch."""
from __future__ import annotations

import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR

import lazy_mlir as lm
from lazy_mlir.models.seed import MLP, LeNet5, MnistCNN, digits

DATA = digits()


def _batches(n_steps, batch, offset=0):
    x, y = DATA[0], DATA[1]
    for i in range(n_steps):
        j = (offset + i * batch) % (len(y) - batch)
        yield x[j:j + batch], y[j:j + batch]


def _loop(device, make_model, make_opt, loss_fn, n_steps, batch, *, sched=None,
          input_grad=False, clip=None, accumulate=1, on_step=None):
    """The user's loop: only the device and mark_step differ between runs."""
    torch.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())
    scheduler = sched(opt) if sched else None
    lazy = device == "lazy"
    losses = []
    for step, (x, y) in enumerate(_batches(n_steps, batch)):
        opt.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            xs = x.chunk(accumulate)[micro].to(device)
            ys = y.chunk(accumulate)[micro].to(device)
            if input_grad:
                xs.requires_grad = True
            loss = loss_fn(model(xs), ys) / accumulate
            loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if scheduler and step % 2 == 1:
            scheduler.step()
        if lazy:
            lm.mark_step()
        losses.append(loss.item())
        if on_step:
            on_step(step)
    return model, losses


def _compare(make_model, make_opt, loss_fn, n_steps=6, batch=16, **kw):
    compiles = []
    lm.metrics.reset()
    lazy_model, lazy_losses = _loop(
        "lazy", make_model, make_opt, loss_fn, n_steps, batch,
        on_step=lambda s: compiles.append(lm.metrics.counter_value("UncachedCompile")), **kw)
    _, eager_losses = _loop("cpu", make_model, make_opt, loss_fn, n_steps, batch, **kw)
    eager_model, _ = _loop("cpu", make_model, make_opt, loss_fn, n_steps, batch, **kw)
    torch.testing.assert_close(torch.tensor(lazy_losses), torch.tensor(eager_losses),
                               rtol=1e-4, atol=1e-5)
    for (name, p_lazy), p_eager in zip(lazy_model.named_parameters(), eager_model.parameters()):
        torch.testing.assert_close(p_lazy.cpu(), p_eager.detach(), rtol=1e-4, atol=1e-5,
                                   msg=lambda m: f"{name}: {m}")
    fallbacks = [n for n in lm.metrics.counter_names() if n.startswith("aten::")]
    assert fallbacks == [], f"ops fell back: {fallbacks}"
    # One compile for the steady-state step: flat from step 3 on.
    assert compiles[2:] == [compiles[2]] * (len(compiles) - 2), compiles
    return lazy_losses


# CI runs a few steps; --runslow runs the full lengths (20 steps of
# numerics, 50 steps of a flat compile count).
STEPS = [6, pytest.param(50, marks=pytest.mark.slow)]


@pytest.mark.parametrize("n_steps", STEPS)
def test_mnist_cnn_adadelta_steplr_matches_eager(n_steps):
    _compare(lambda: MnistCNN(dropout=False), lambda p: torch.optim.Adadelta(p, lr=1.0),
             F.nll_loss, n_steps=n_steps, batch=8,
             sched=lambda o: StepLR(o, step_size=1, gamma=0.7))


@pytest.mark.parametrize("n_steps", [6, pytest.param(20, marks=pytest.mark.slow)])
def test_lenet5_sgd_with_input_grad_matches_eager(n_steps):
    criterion = lambda pred, true: F.nll_loss(nn.LogSoftmax(dim=-1)(pred), true)  # noqa: E731
    _compare(LeNet5, lambda p: torch.optim.SGD(p, lr=0.001), criterion, n_steps=n_steps,
             batch=4, input_grad=True)


@pytest.mark.parametrize("n_steps", [6, pytest.param(20, marks=pytest.mark.slow)])
def test_mlp_adam_cross_entropy_clip_and_accumulation(n_steps):
    _compare(lambda: MLP((784, 64, 32, 10)), lambda p: torch.optim.Adam(p, lr=1e-3),
             F.cross_entropy, n_steps=n_steps, batch=16, clip=0.5, accumulate=2)


def test_eval_under_no_grad_matches_eager():
    torch.manual_seed(0)
    model = LeNet5().eval()
    lazy_model = LeNet5().eval()
    lazy_model.load_state_dict(model.state_dict())
    lazy_model.to("lazy")
    x = DATA[2][:32]
    with torch.no_grad():
        expected = model(x)
        got = lazy_model(x.to("lazy"))
    lm.mark_step()
    torch.testing.assert_close(got.cpu(), expected, rtol=1e-4, atol=1e-5)
    assert not got.requires_grad


def test_smaller_last_batch_compiles_once_more_and_both_stay_cached():
    torch.manual_seed(0)
    model = MLP((784, 32, 10)).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = DATA[0], DATA[1]

    def step(n):
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[:n].to("lazy")), y[:n].to("lazy")).backward()
        opt.step()
        lm.mark_step()

    for n in (16, 16, 16):
        step(n)
    lm.wait_device_ops()
    before = lm.metrics.counter_value("UncachedCompile")
    step(10)
    assert lm.metrics.counter_value("UncachedCompile") == before + 1
    for n in (16, 10, 16, 10):
        step(n)
    assert lm.metrics.counter_value("UncachedCompile") == before + 1


def test_dropout_fresh_mask_rate_no_recompile_and_reproducible():
    p, n = 0.3, 4000
    sigma = (p * (1 - p) / n) ** 0.5

    def masks(seed, steps=3):
        torch.manual_seed(seed)
        x = torch.ones(n).to("lazy")
        out = []
        for _ in range(steps):
            y = F.dropout(x, p, training=True)
            lm.mark_step()
            out.append(y.cpu())
        return out

    lm.metrics.reset()
    a = masks(1)
    assert lm.metrics.counter_value("UncachedCompile") == 1  # randomness does not recompile
    for m in a:
        dropped = (m == 0).float().mean().item()
        assert abs(dropped - p) < 3 * sigma, dropped
        assert torch.allclose(m[m != 0], torch.tensor(1 / (1 - p)))
    assert not torch.equal(a[0], a[1]) and not torch.equal(a[1], a[2])
    b = masks(1)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(masks(2, 1)[0], a[0])


def test_dropout_backward_uses_the_same_mask():
    torch.manual_seed(0)
    x = torch.ones(1000).to("lazy").requires_grad_()
    y = F.dropout(x, 0.5, training=True)
    y.sum().backward()
    lm.mark_step()
    torch.testing.assert_close(x.grad.cpu(), y.detach().cpu())


def test_fallback_op_still_trains_with_one_warning(caplog):
    from lazy_mlir.ops import support

    class WithErf(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return torch.special.erf(self.fc(x))

    support.deny("erf", "test: pretend erf cannot be compiled")
    try:
        caplog.set_level(logging.WARNING, logger="lazy_mlir")
        lm.metrics.reset()
        torch.manual_seed(0)
        model = WithErf().to("lazy")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.randn(4, 8)
        losses = []
        for _ in range(3):
            opt.zero_grad()
            loss = model(x.to("lazy")).pow(2).sum()
            loss.backward()
            opt.step()
            lm.mark_step()
            losses.append(loss.item())
        torch.manual_seed(0)
        ref = WithErf()
        ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
        expected = []
        for _ in range(3):
            ropt.zero_grad()
            loss = ref(x).pow(2).sum()
            loss.backward()
            ropt.step()
            expected.append(loss.item())
        torch.testing.assert_close(torch.tensor(losses), torch.tensor(expected), rtol=1e-4,
                                   atol=1e-5)
        assert lm.metrics.counter_value("aten::erf") == 3
        warnings = [r for r in caplog.records if "aten::erf" in r.getMessage()]
        assert len(warnings) <= 1  # once per process (may have been issued earlier)
    finally:
        support.DENIED.pop("erf", None)


def test_batchnorm_train_and_eval_compile_and_match_eager():
    def make():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 26 * 26, 10))

    lm.metrics.reset()
    x, y = DATA[0][:8], DATA[1][:8]
    models = {}
    for device in ("cpu", "lazy"):
        model = make().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(2):
            opt.zero_grad()
            F.cross_entropy(model(x.to(device)), y.to(device)).backward()
            opt.step()
            if device == "lazy":
                lm.mark_step()
        model.eval()
        with torch.no_grad():
            models[device] = (model(x.to(device)).cpu(), model[1].running_mean.cpu())
    for got, expected in zip(models["lazy"], models["cpu"]):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::")]
