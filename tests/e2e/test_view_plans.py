"""View plans (``dispatch._view``, ``capture.apply_view``): a view op on a
base spec it has seen costs a wrapper tensor, and reading it a node from the
kept record plan; a value whose layout differs from its tensor's, and
constants that cannot be keyed, take the slow path with the same results."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from lazy_mlir.lazy import state
from lazy_mlir.lazy.capture import assign, op_info, value_of


def _plan_of(t):
    return t._view[-1][4]


def test_a_repeated_view_reuses_its_plan_and_node_plan():
    x = torch.randn(4, 6)
    lx = x.to("lazy")
    first = lx.view(6, 4).t()
    assert (first * 2).cpu().tolist() == (x.view(6, 4).t() * 2).tolist()
    vp = _plan_of(first)
    assert vp.node_plan is not None  # recorded once through emit: its plan is kept
    second = lx.view(6, 4).t()
    assert _plan_of(second) is vp
    assert (second + 1).cpu().tolist() == (x.view(6, 4).t() + 1).tolist()
    assert any(k[0] is op_info(torch.ops.aten.t.default) for k in state.view_plans)


def test_a_value_laid_out_unlike_its_tensor_takes_the_slow_path():
    src = torch.randn(5, 3)
    dst = torch.zeros(3, 5).to("lazy")
    assert (dst.t() * 3).cpu().tolist() == torch.zeros(5, 3).tolist()
    assert _plan_of(dst.t()).node_plan is not None  # kept for dst's contiguous layout
    # copy_ writes in dst's layout (a later view is inferred on the value)...
    dst.copy_(src.to("lazy").t())
    assert dst._storage.value.spec.stride == dst.spec.stride
    # ... but a value laid out transposed under a contiguous wrapper (what
    # copy_ once assigned) still reads right: written here directly.
    assign(dst, value_of(torch.ops.aten.clone.default(src.to("lazy").t())))
    value = dst._storage.value
    assert value.spec.stride != dst.spec.stride
    v = dst.t()
    assert _plan_of(v).node_plan is not None
    read = value_of(v)  # not from the kept plan: made for the value's own layout
    assert read.spec.stride == value.spec.meta().t().stride()
    assert (v * 3).cpu().tolist() == (src * 3).tolist()
    lm.mark_step()
    assert (dst.t() + 1).cpu().tolist() == (src + 1).tolist()


def test_views_whose_constants_are_not_keyed_match_eager():
    x = torch.randn(2, 8)
    lx = x.to("lazy")
    for _ in range(2):
        a = lx.view(torch.int32)  # a dtype constant
        b = torch.ops.aten.expand.default(lx[:1], [3, 8], implicit=True)  # a keyword
        assert torch.equal(a.cpu(), x.view(torch.int32))
        assert torch.equal((b * 1.5).cpu(), x[:1].expand(3, 8) * 1.5)
        lm.mark_step()
