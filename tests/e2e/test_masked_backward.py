"""The backward of a write through a bool mask compiles as one node
(``lazy/masked_backward.py``): autograd's ``grad[mask]`` for the values has
a data-dependent shape, so wav2vec2's and HuBERT's masked time steps
(``hidden[mask] = masked_spec_embed``) ran the backward op by op with the
``index`` eagerly, a graph cut every step."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close


class _MaskedSteps(torch.nn.Module):
    """wav2vec2's pattern: a learned vector written over masked time steps."""

    def __init__(self, how: str):
        super().__init__()
        self.how = how
        self.proj = torch.nn.Linear(6, 8)
        self.embed = torch.nn.Parameter(torch.randn(8))
        self.out = torch.nn.Linear(8, 3)

    def forward(self, x, mask):
        h = self.proj(x)
        if self.how == "setitem":
            h[mask] = self.embed
        elif self.how == "accumulate":
            h = h.index_put((mask,), self.embed, accumulate=True)
        else:  # a mask over the time steps of every sequence, after a full slice
            h[:, mask[0]] = self.embed
        return self.out(h).square().mean()


def _train(model, steps, device):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=device == "lazy")
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        x, mask = torch.randn(4, 5, 6, generator=g), torch.rand(4, 5, generator=g) > 0.6
        opt.zero_grad(set_to_none=True)
        loss = model(x.to(device), mask.to(device))
        loss.backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return losses


def test_masked_writes_train_with_one_node_backward(counters):
    for how in ("setitem", "accumulate", "columns"):
        torch.manual_seed(0)
        eager = _MaskedSteps(how)
        model = _MaskedSteps(how)
        model.load_state_dict(eager.state_dict())
        model.to("lazy")
        counters.snapshot()
        losses = _train(model, 3, "lazy")
        expected = _train(eager, 3, "cpu")
        assert not counters.fell_back(), (how, counters.fell_back())
        assert counters.delta("backward::ops") == 0 and counters.delta("backward::one_node") == 3
        assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, expected)), \
            (how, losses, expected)
        for p, q in zip(model.parameters(), eager.parameters()):
            assert_lazy_close(p, q, rtol=1e-5, atol=1e-6)


class _UsersScale(torch.autograd.Function):
    """A user's ``autograd.Function`` (SEW-D's ``XDropout``): its backward is
    not traced into one node, so the whole backward runs op by op."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _MaskedStepsAndUsersFunction(_MaskedSteps):
    def forward(self, x, mask):
        h = _UsersScale.apply(self.proj(x))
        h[mask] = self.embed
        return self.out(h).square().mean()


def test_a_masked_write_in_a_backward_run_op_by_op_does_not_fall_back(counters):
    """SEW-D's backward runs op by op (its XDropout); autograd's
    ``grad[mask]`` for the masked time steps' vector then ran its ``index``
    eagerly every step (the sweep's 'fallback: index')."""
    torch.manual_seed(0)
    eager = _MaskedStepsAndUsersFunction("setitem")
    model = _MaskedStepsAndUsersFunction("setitem")
    model.load_state_dict(eager.state_dict())
    model.to("lazy")
    counters.snapshot()
    losses = _train(model, 2, "lazy")
    expected = _train(eager, 2, "cpu")
    assert counters.delta("backward::ops") == 2
    assert not counters.fell_back(), counters.fell_back()
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(losses, expected)), (losses, expected)
    for p, q in zip(model.parameters(), eager.parameters()):
        assert_lazy_close(p, q, rtol=1e-5, atol=1e-6)
