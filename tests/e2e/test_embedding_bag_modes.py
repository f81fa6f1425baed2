"""embedding_bag compiled (no fallback of the forward) and equal to eager in
all four results of ``_embedding_bag_forward_only`` / ``_embedding_bag``
(offset2bag, bag_size and max_indices feed the backward): sum with
per-sample weights, mean, max (NaN first in a bag kept, later NaN skipped,
-0.0 before 0.0, ties to the first), padding_idx, include_last_offset,
empty bags, infinite rows of other bags, max_norm renormalisation
(``dialects/embedding_bag_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy

NAN, INF = float("nan"), float("inf")
aten = torch.ops.aten

_W = torch.tensor([[1., -2., 0.5], [NAN, 3., 0.0], [2., 3., -0.0], [INF, -1., 7.],
                   [-0.0, 3., 0.5], [4., NAN, -INF], [0.5, 0.5, 0.5]])
_IDX = torch.tensor([2, 1, 4, 0, 0, 6, 3, 5, 1, 6, 2])
_OFF = torch.tensor([0, 3, 3, 5, 8])  # bag 1 is empty
_PSW = torch.linspace(-1.5, 2.0, 11)


def _check(fn, *inputs, exact=True):
    before = {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}
    expected = fn(*[t.clone() for t in inputs])
    actual = fn(*[lazy(t) for t in inputs])
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype, (a.shape, e.shape)
        tol = dict(rtol=0, atol=0) if exact else {}
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, **tol)
    fell_back = {n: lm.metrics.counter_value(n) - before.get(n, 0)
                 for n in lm.metrics.counter_names() if n.startswith("aten::")}
    assert not any(fell_back.values()), fell_back


def _forward_only(variants):
    def bags(w, i, o, psw):
        outs = []
        for mode, weighted, pad, last in variants:
            outs += aten._embedding_bag_forward_only(w, i, o, False, mode, False,
                                                     psw if weighted else None, last, pad)
        return outs
    _check(bags, _W, _IDX, _OFF, _PSW, exact=False)


def test_forward_only_all_results():
    # (mode, per-sample weights, padding_idx, include_last_offset): the fast
    # sum path, the slow mean path, max with padding
    _forward_only([(0, True, -1, True), (1, False, 0, True), (2, False, 4, False)])


@pytest.mark.slow
def test_forward_only_all_results_more_variants():
    _forward_only([(0, True, -1, False), (0, False, 6, False), (1, False, -1, True),
                   (1, False, -1, False), (2, False, -1, False), (2, False, 4, True)])


def test_training_max_and_mean_backward():
    # the backward reads our max_indices, bag_size and offset2bag
    def step(w, i, o):
        w = w.requires_grad_()
        a = F.embedding_bag(i, w, o, mode="max", padding_idx=4)
        b = F.embedding_bag(i, w, o, mode="mean", include_last_offset=True)
        (a * torch.arange(1., 4.).to(a.device)).sum().backward()
        b.sum().backward()
        return a.detach(), b.detach(), w.grad
    w = torch.randn(7, 3, generator=torch.Generator().manual_seed(0))
    w[2, 1] = w[0, 1]  # a tie: the first index wins
    expected = step(w.clone(), _IDX, _OFF)
    before = lm.metrics.counter_value("aten::_embedding_bag")
    actual = step(lazy(w), lazy(_IDX), lazy(_OFF))
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e)
    assert lm.metrics.counter_value("aten::_embedding_bag") == before


def test_max_norm_renormalises_named_rows():
    def lookup(w, i, o):
        out = F.embedding_bag(i, w, o, mode="sum", max_norm=2.0, norm_type=1.0)
        return out, w  # the named rows of w are scaled in place
    w = torch.randn(7, 3, generator=torch.Generator().manual_seed(1)) * 3
    w[5, 0] = NAN  # a NaN norm: left alone
    _check(lookup, w, torch.tensor([0, 5, 2, 2, 6]), torch.tensor([0, 2]), exact=False)
