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
