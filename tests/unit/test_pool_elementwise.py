"""The pool_elementwise fx pass: non-overlapping max pooling and its gradient as
elementwise ops, checked against aten on real tensors (no compiler), including
ties, NaN and -inf, where the chosen index matters for the gradient."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.passes import pool_elementwise as pe

aten = torch.ops.aten


def _input(shape, seed, special):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if special:
        x = torch.relu(x)                     # many all-zero windows: ties
        flat = x.view(-1)
        flat[::7] = float("nan")
        flat[3::11] = float("-inf")
        flat[5::13] = float("inf")
        x[0, 0] = float("-inf")               # whole windows of -inf
        x[-1, -1, :2] = float("nan")          # whole windows of NaN
    return x


# (shape, kernel, stride, ceil_mode)
CASES = [
    ((2, 3, 8, 8), [2, 2], [2, 2], False),
    ((2, 3, 9, 7), [2, 2], [], False),        # odd sizes: last row/column in no window
    ((1, 2, 9, 9), [3, 3], [3, 3], True),
    ((2, 2, 6, 8), [2, 4], [2, 4], False),
    ((1, 1, 4, 4), [1, 1], [1, 1], False),
]


@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"k{c[1]}")
def test_forward_and_backward_match_aten(case, special):
    shape, k, s, ceil = case
    x = _input(shape, 0, special)
    args = (k, s, [0, 0], [1, 1], ceil)
    want_v, want_i = aten.max_pool2d_with_indices(x, *args)
    got_v, got_i = pe.max_pool2d_with_indices(x, *args)
    torch.testing.assert_close(got_v, want_v, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(got_i, want_i)
    grad = torch.randn(want_v.shape, generator=torch.Generator().manual_seed(1))
    want = aten.max_pool2d_with_indices_backward(grad, x, *args, want_i)
    got = pe.max_pool2d_with_indices_backward(grad, x, *args, want_i)
    assert got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_left_alone_when_windows_overlap_or_are_padded():
    x = torch.randn(1, 2, 8, 8)
    assert pe.max_pool2d_with_indices(x, [3, 3], [2, 2]) is NotImplemented       # overlap
    assert pe.max_pool2d_with_indices(x, [2, 2], [2, 2], [1, 1]) is NotImplemented  # padding
    assert pe.max_pool2d_with_indices(x, [2, 2], [2, 2], 0, [2, 2]) is NotImplemented
    assert pe.max_pool2d_with_indices(torch.randn(1, 2, 9, 9), [2, 2], [2, 2], 0, 1,
                                      True) is NotImplemented                   # partial window
    assert pe.max_pool2d_with_indices(x.long(), [2, 2]) is NotImplemented
    assert pe.max_pool2d_with_indices(torch.randn(2, 8, 8), [2, 2]) is NotImplemented  # 3-d


TRACED = {  # pool, the ops it must not leave, its input (NaN and infinities: max only)
    "max": (torch.nn.functional.max_pool2d, (aten.max_pool2d_with_indices.default,
                                             aten.max_pool2d_with_indices_backward.default),
            lambda: _input((2, 3, 8, 8), 2, True).nan_to_num(0.0, 1.0, -1.0)),
    "avg": (torch.nn.functional.avg_pool2d, (aten.avg_pool2d.default,
                                             aten.avg_pool2d_backward.default),
            lambda: _input((2, 3, 9, 8), 2, False)),
}


@pytest.mark.parametrize("kind", TRACED)
def test_traced_pool_step_has_no_pooling_ops(kind):
    pool, gone, make = TRACED[kind]

    def step(x):
        out = pool(x, 2)
        return torch.autograd.grad(out.square().sum(), x)

    x = make().requires_grad_()
    gm = make_fx(step, decomposition_table=pe.DECOMPOSITIONS)(x)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    for op in gone:
        assert op not in targets
    torch.testing.assert_close(gm(x)[0], step(x)[0], rtol=0, atol=0)


def test_pools_it_leaves_alone_keep_the_base_decomposition():
    # pipeline.fx_graph.decompose: where this pass returns NotImplemented the
    # base table's max_pool2d_with_indices decomposition must still apply
    from lazy_mlir.pipeline.fx_graph import decompose

    def pool(x):
        return aten.max_pool2d_with_indices(x, [3, 3], [2, 2], [0, 0], [1, 2], True)

    gm = make_fx(pool, tracing_mode="fake")(torch.randn(1, 2, 3, 6))
    ops = lambda g: sorted(str(n.target) for n in g.graph.nodes if n.op == "call_function")
    assert ops(decompose(gm, pe.DECOMPOSITIONS)) == ops(decompose(gm))


@pytest.mark.parametrize("divisor", [None, 3], ids=["mean", "divisor3"])
@pytest.mark.parametrize("special", [False, True], ids=["plain", "special"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"k{c[1]}")
def test_average_pool_forward_and_backward_match_aten(case, special, divisor):
    shape, k, s, ceil = case
    x = _input(shape, 0, special)
    args = (k, s, [0, 0], ceil, True, divisor)
    want = aten.avg_pool2d(x, *args)
    got = pe.avg_pool2d(x, *args)
    assert got.is_contiguous()
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    grad = torch.randn(want.shape, generator=torch.Generator().manual_seed(1))
    want_g = aten.avg_pool2d_backward(grad, x, *args)
    got_g = pe.avg_pool2d_backward(grad, x, *args)
    assert got_g.is_contiguous()
    torch.testing.assert_close(got_g, want_g, rtol=0, atol=0)


def test_average_pools_it_leaves_alone():
    x = torch.randn(1, 2, 8, 8)
    assert pe.avg_pool2d(x, [3, 3], [2, 2]) is NotImplemented                    # overlap
    assert pe.avg_pool2d(x, [2, 2], [2, 2], [1, 1]) is NotImplemented            # padding
    assert pe.avg_pool2d(torch.randn(1, 2, 9, 9), [2, 2], [2, 2], 0, True) is NotImplemented
    assert pe.avg_pool2d(torch.randn(2, 8, 8), [2, 2]) is NotImplemented         # 3-d
    g = torch.randn(1, 2, 4, 4)
    assert pe.avg_pool2d_backward(g, x, [3, 3], [2, 2], [0, 0], False, True, None) is NotImplemented
