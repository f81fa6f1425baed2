"""A backward that compiled autograd refuses while collecting it runs on
autograd's own engine, op by op, instead of killing the program (an in-place
dropout on a flattened view: ``view_fn not supported by compiled autograd``,
transformers' MobileNetV2 classifier)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy


def _step(x, w, seed):
    torch.manual_seed(seed)
    h = F.dropout((x * 2).flatten(1), 0.5, training=True, inplace=True)
    loss = (h @ w).sum()
    loss.backward()
    return loss


def test_backward_of_an_in_place_op_on_a_view_matches_eager(counters):
    x, w = torch.randn(3, 2, 4), torch.randn(8, 4)
    x_eager = x.clone().requires_grad_()
    loss = _step(x_eager, w, seed=1)
    x_lazy = lazy(x).requires_grad_()
    counters.snapshot()
    lazy_loss = _step(x_lazy, lazy(w), seed=1)
    lm.mark_step()
    assert counters.delta("backward::ops") == 1
    torch.testing.assert_close(lazy_loss.cpu(), loss)
    torch.testing.assert_close(x_lazy.grad.cpu(), x_eager.grad)


class _ScaledByAConstant(torch.autograd.Function):
    """``a * m`` whose backward treats ``m`` as a constant (``None``), as
    transformers' ``PhimoeMultiplier`` does for its router's multiplier."""

    @staticmethod
    def forward(ctx, a, m):
        ctx.save_for_backward(m)
        return a * m

    @staticmethod
    def backward(ctx, grad):
        m, = ctx.saved_tensors
        return grad * m, None


def _scaled_step(x, w):
    h = x @ w
    m = h.sigmoid()  # (needs a gradient: it feeds the loss directly too)
    (_ScaledByAConstant.apply(h, m) + m.sum()).sum().backward()


def test_a_custom_backward_that_returns_no_gradient_for_an_input_that_needs_one(counters):
    # (sweep hf/causal-lm/phimoe died: compiled autograd's sum of m's two
    # gradients, torch.add(grad, None), where eager's engine adds nothing)
    x, w = torch.randn(2, 4), torch.randn(4, 3)
    w_eager = w.clone().requires_grad_()
    _scaled_step(x, w_eager)
    w_lazy = lazy(w).requires_grad_()
    counters.snapshot()
    _scaled_step(lazy(x), w_lazy)
    lm.mark_step()
    assert counters.delta("backward::ops") == 1
    torch.testing.assert_close(w_lazy.grad.cpu(), w_eager.grad)
