"""Training-mode ``embedding_bag`` (``_embedding_bag``) is not lowered by
torch-mlir (``support.DENIED``: it summed without the per-sample weights, 3.2
off, and gave offset2bag a shape PyTorch does not); it is captured as our
decomposition (``dialects/embedding_bag_decompositions.py``), whose four
results are ATen's, so the backward (``_embedding_bag_backward``, decomposed
at capture for sum and mean bags: ``ops/embedding_bag.py``) gets the same
gradient."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
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


@pytest.mark.parametrize("mode,weighted,padding_idx,backward", [
    ("sum", False, None, "one"),    # the fast path: an empty offset2bag, the backward one node
    ("sum", False, None, "ops"),
    ("sum", True, 4, "one"),
    ("mean", False, 2, "one"),
])
def test_the_weight_gradient_compiles(monkeypatch, counters, mode, weighted, padding_idx,
                                      backward):
    """``_embedding_bag_backward`` is decomposed at capture (it ran eagerly
    every step: the sweep's nn/embedding_bag), the empty offset2bag of the
    sum fast path included (it sent the backward's one node to the CPU)."""
    monkeypatch.setenv("LAZY_MLIR_BACKWARD", backward)

    def grad(weight, psw):
        out = F.embedding_bag(_IDX.to(weight.device), weight, _OFFSETS.to(weight.device),
                              mode=mode, per_sample_weights=psw, padding_idx=padding_idx)
        (out * torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device)
         ).sum().backward()
        lm.mark_step()
        return weight.grad.cpu()
    psw = _PSW if weighted else None
    expected = grad(_W.clone().requires_grad_(), psw)
    actual = grad(lazy(_W).requires_grad_(), None if psw is None else lazy(psw))
    torch.testing.assert_close(actual, expected)
    assert counters.fell_back() == [] and counters.delta("EagerGraph") == 0
