"""Several sorts of one tensor in one graph: IREE sorts their shared operand
in place for each, so such a graph runs eagerly (and answers right)."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import lazy


def test_topks_of_one_tensor_in_one_graph_match_eager():
    x = torch.randn(5, 10, 5, generator=torch.Generator().manual_seed(0))
    lx = lazy(x)
    got = [torch.topk(lx, 3, 1), torch.topk(lx, 3, 1, largest=False)]
    lm.mark_step()
    for (v, i), (ev, ei) in zip(got, [torch.topk(x, 3, 1), torch.topk(x, 3, 1, largest=False)]):
        assert torch.equal(v.cpu(), ev)
        assert torch.equal(i.cpu(), ei)


def test_one_topk_still_compiles():
    x = torch.randn(5, 10, generator=torch.Generator().manual_seed(1))
    before = lm.metrics.counter_value("UncachedCompile")
    v, i = torch.topk(lazy(x), 3, 1)
    assert torch.equal(i.cpu(), torch.topk(x, 3, 1).indices)
    assert lm.metrics.counter_value("UncachedCompile") == before + 1
