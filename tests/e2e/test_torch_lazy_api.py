"""The LTC tutorial's code, written with ``torch._lazy``, runs on lazy-mlir.

The seeds' notebook (PyTorch's Lazy Tensor tutorial) calls
``torch._lazy.mark_step()``, ``torch._lazy.wait_device_ops()`` and
``torch._lazy.metrics.*``; after ``import lazy_mlir`` (instead of
``torch._lazy.ts_backend.init()``) those act on lazy-mlir's device.
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch
import torch._lazy
import torch._lazy.metrics
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.frontends import torch_lazy
from lazy_mlir.models.seed import LeNet5, MnistCNN, digits


class _LogSoftmax(torch.nn.Module):
    """A network ending in log_softmax, as the tutorial's (its loss is nll_loss)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return F.log_softmax(self.net(x), dim=1)


def add_two_maybe(t: torch.Tensor, maybe: torch.Tensor):
    if maybe:
        return t + 2
    return t


def test_add_two_maybe_as_in_the_tutorial():
    t = torch.ones(1)
    for flag in (0, 1):
        maybe = torch.BoolTensor([flag])
        lazy_result = add_two_maybe(t.to("lazy"), maybe.to("lazy"))
        assert lazy_result.device.type == "lazy"
        assert lazy_result.cpu() == add_two_maybe(t, maybe)


def train(log_interval, model, device, train_loader, optimizer, epoch, losses):
    """The tutorial's ``train``, word for word but for collecting losses."""
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad(set_to_none=True)
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        torch._lazy.mark_step()
        if batch_idx % log_interval == 0:
            losses.append(loss.item())  # the tutorial prints it: a sync point


@pytest.mark.parametrize("net", [
    "lenet5",  # CI: a small convolutional network, fast to compile
    pytest.param("tutorial", marks=pytest.mark.slow)])  # the tutorial's Net, dropout off
def test_tutorial_training_loop_with_torch_lazy_calls(net):
    assert torch_lazy.installed()
    x, y = (t[:24] for t in digits()[:2])
    loader = [(x[i:i + 8], y[i:i + 8]) for i in range(0, 24, 8)]
    torch.manual_seed(0)
    # dropout off: the lazy device draws other random numbers than eager
    eager = MnistCNN(dropout=False) if net == "tutorial" else _LogSoftmax(LeNet5())
    model = copy.deepcopy(eager).to("lazy")
    runs = {}
    for name, m, device in (("eager", eager, "cpu"), ("lazy", model, "lazy")):
        optimizer = torch.optim.Adadelta(m.parameters(), lr=1.0)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
        torch._lazy.metrics.reset()
        runs[name] = []
        train(1, m, device, loader, optimizer, 1, runs[name])
        scheduler.step()
    torch._lazy.wait_device_ops()
    torch.testing.assert_close(runs["lazy"], runs["eager"], rtol=1e-4, atol=1e-5)
    names = torch._lazy.metrics.counter_names()
    assert names == lm.metrics.counter_names()
    assert torch._lazy.metrics.counter_value("MarkStep") == 3
    assert "lazy::convolution" in names
    assert "Counter: MarkStep" in torch._lazy.metrics.metrics_report()
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


def test_mark_step_wait_and_reset_act_on_lazy_mlir():
    x = torch.randn(5, device="lazy")
    y = (x * 3).sum()
    torch._lazy.metrics.reset()
    assert lm.metrics.counter_names() == []
    torch._lazy.mark_step(wait=True)
    assert torch._lazy.metrics.counter_value("MarkStep") == 1
    torch._lazy.wait_device_ops(devices=["lazy:0"])
    torch.testing.assert_close(y.cpu(), (x.cpu() * 3).sum())


def test_uninstall_puts_pytorch_functions_back():
    assert torch._lazy.mark_step is torch_lazy.mark_step
    torch_lazy.uninstall()
    try:
        assert not torch_lazy.installed()
        assert torch._lazy.mark_step.__module__ == "torch._lazy"
        assert torch._lazy.metrics.counter_names.__module__ == "torch._lazy.metrics"
    finally:
        torch_lazy.install()
    assert torch_lazy.installed()


def test_environment_can_leave_torch_lazy_alone():
    code = ("import torch._lazy, lazy_mlir\n"
            "print(torch._lazy.mark_step.__module__)")
    env = dict(os.environ, LAZY_MLIR_TORCH_LAZY_API="0",
               PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(
                   os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "torch._lazy"
