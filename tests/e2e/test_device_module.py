"""``torch.lazy``, the lazy device's runtime module: what device-generic
PyTorch code calls (random state, synchronize), and the code that calls it:
``torch.utils.checkpoint`` (its recompute must draw the forward's dropout
mask) and ``torch.random.fork_rng``."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import lazy_mlir as lm


def test_registered_as_torch_lazy():
    assert torch.get_device_module("lazy") is torch.lazy
    assert torch.get_device_module(torch.device("lazy", 0)) is torch.lazy
    assert torch.lazy.is_available() and torch.lazy.device_count() == 1
    assert torch.lazy.current_device() == 0
    with torch.lazy.device(0), torch.lazy.device("lazy:0"):
        pass
    with pytest.raises(ValueError):
        torch.lazy.device(1)
    with pytest.raises(ValueError):
        torch.lazy.get_rng_state("cpu")


def test_synchronize_reports_a_failed_graph():
    """It joins the graphs run in the background: an index error found in
    one surfaces there, as from lm.wait_device_ops()."""
    index = torch.tensor([0, 9]).to("lazy") * 1  # device data: checked in the graph
    lm.mark_step()
    picked = (torch.arange(6.0).to("lazy") + 0)[index]  # noqa: F841 - never read
    lm.mark_step()
    with pytest.raises(IndexError):
        torch.lazy.synchronize()
    torch.lazy.synchronize()  # reported once


def _draws(x):
    """Random numbers of both kinds a lazy tensor gets: an in-graph dropout
    mask (seeded when recorded) and a host-drawn fill."""
    return F.dropout(x, 0.5, training=True), torch.randn(3, device="lazy")


def test_rng_state_restores_what_lazy_ops_draw():
    x = torch.ones(64).to("lazy")
    torch.lazy.manual_seed(5)
    assert torch.lazy.initial_seed() == 5
    state = torch.lazy.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = [t.cpu() for t in _draws(x)]
    second = [t.cpu() for t in _draws(x)]
    assert not torch.equal(first[0], second[0])  # a new mask each time...
    torch.lazy.set_rng_state(state)
    again = [t.cpu() for t in _draws(x)]
    for a, b in zip(first, again):  # ...and the same one after restoring the state
        assert torch.equal(a, b)
    torch.lazy.manual_seed_all(5)
    assert torch.equal(_draws(x)[0].cpu(), first[0])
    torch.lazy.seed()
    assert torch.lazy.initial_seed() != 5


def test_fork_rng_on_the_lazy_device():
    x = torch.ones(64).to("lazy")
    torch.manual_seed(3)
    expected = F.dropout(x, 0.5, training=True).cpu()
    torch.manual_seed(3)
    with torch.random.fork_rng(device_type="lazy"):
        inside = F.dropout(x, 0.5, training=True).cpu()
        F.dropout(x, 0.5, training=True)  # draws that the fork forgets
    after = F.dropout(x, 0.5, training=True).cpu()
    assert torch.equal(inside, expected) and torch.equal(after, expected)


class _Net(nn.Module):
    """A block with dropout run under checkpoint (or not), then a head."""

    def __init__(self, p: float):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(p), nn.Linear(16, 8))
        self.head = nn.Linear(8, 2)

    def forward(self, x, mode, preserve=True):
        if mode == "plain":
            h = self.block(x)
        else:
            h = checkpoint(self.block, x, use_reentrant=(mode == "reentrant"),
                           preserve_rng_state=preserve)
        return self.head(torch.tanh(h))


def _grads(device, mode, p, preserve=True, steps=1):
    """Gradients (and losses) of ``steps`` SGD steps from one seed."""
    torch.manual_seed(0)
    net = _Net(p).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    x = torch.randn(4, 8).to(device).requires_grad_(True)
    y = torch.randn(4, 2).to(device)
    torch.manual_seed(1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        x.grad = None
        loss = F.mse_loss(net(x, mode, preserve), y)
        loss.backward()
        grads = [x.grad] + [q.grad for q in net.parameters()]
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return [g.cpu() for g in grads], losses


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_checkpoint_recomputes_the_forward_dropout_mask(mode):
    plain, _ = _grads("lazy", "plain", 0.5)
    checked, _ = _grads("lazy", mode, 0.5)
    for a, b in zip(plain, checked):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    # Without restoring the random state the recompute draws another mask:
    # the check above can fail.
    forgot, _ = _grads("lazy", mode, 0.5, preserve=False)
    assert any(not torch.allclose(a, b) for a, b in zip(plain, forgot))


@pytest.mark.parametrize("mode", ["reentrant", "non_reentrant"])
def test_checkpoint_trains_like_eager(mode):
    """No dropout (eager CPU draws its masks otherwise): losses and last
    gradients of three steps equal eager's."""
    lazy_grads, lazy_losses = _grads("lazy", mode, 0.0, steps=3)
    cpu_grads, cpu_losses = _grads("cpu", mode, 0.0, steps=3)
    torch.testing.assert_close(lazy_losses, cpu_losses, rtol=1e-5, atol=1e-6)
    for a, b in zip(lazy_grads, cpu_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
