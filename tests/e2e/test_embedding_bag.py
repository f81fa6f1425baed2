"""Training-mode ``embedding_bag`` (``_embedding_bag``) is not lowered by
torch-mlir (``support.DENIED``: it summed without the per-sample weights, 3.2
off, and gave offset2bag a shape PyTorch does not); it is captured as our
decomposition (``dialects/embedding_bag_decompositions.py``), whose four
results are ATen's, so the backward (``_embedding_bag_backward``, run
eagerly) gets the same gradient."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from e2e_helpers import lazy

_G = torch.Generator().manual_seed(0)
_W = torch.randn(10, 3, generator=_G)
_IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
_OFFSETS = torch.tensor([0, 4])
_PSW = torch.randn(8, generator=_G)


def _bags(weight, per_sample_weights):
    """Training-mode embedding_bag (a weight that needs grad: ``_embedding_bag``)."""
    out = F.embedding_bag(_IDX.to(weight.device), weight, _OFFSETS.to(weight.device), mode="sum",
                          per_sample_weights=per_sample_weights)
    out.sum().backward()
    return out.detach(), weight.grad


def test_weighted_embedding_bag_is_decomposed(counters):
    expected = _bags(_W.clone().requires_grad_(), _PSW)
    actual = _bags(lazy(_W).requires_grad_(), lazy(_PSW))  # compiled, it was 3.2 off
    torch.testing.assert_close(actual[0].cpu(), expected[0])
    torch.testing.assert_close(actual[1].cpu(), expected[1])
    assert counters.delta("aten::_embedding_bag") == 0
    assert counters.delta("decomposed::_embedding_bag") == 1


def test_unweighted_embedding_bag_is_decomposed(counters):
    expected = _bags(_W.clone().requires_grad_(), None)
    actual = _bags(lazy(_W).requires_grad_(), None)
    torch.testing.assert_close(actual[0].cpu(), expected[0])
    torch.testing.assert_close(actual[1].cpu(), expected[1])
    assert counters.delta("aten::_embedding_bag") == 0
    assert counters.delta("decomposed::_embedding_bag") == 1
