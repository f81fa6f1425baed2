"""Several sorts of one tensor in one graph: IREE sorts an operand they
share in place for each, so each sort gets its own copy of it
(``pipeline/in_place.unshare_sort_operands``) and the graph compiles right."""
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


def test_two_routers_topk_in_one_graph_compile(counters):
    """Two sorts of one shape share the index ``iota`` torch-mlir's CSE
    merged (a MoE router's top-k twice in a step): each gets its own copy
    (``pipeline/in_place.unshare_sort_operands``) and the graph compiles
    (it ran eagerly: Mixtral's every step)."""
    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(2))

    def routers(t):
        return torch.topk(t.softmax(-1), 2, -1), torch.topk((t * 3).sigmoid(), 2, -1)
    counters.snapshot()
    got = routers(lazy(x))
    lm.mark_step()
    for (v, i), (ev, ei) in zip(got, routers(x)):
        torch.testing.assert_close(v.cpu(), ev)
        assert torch.equal(i.cpu(), ei)
    assert counters.delta("EagerGraph") == 0
    assert counters.delta("UncachedCompile") == 1
