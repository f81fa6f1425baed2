"""Our decompositions compute what the ops they replace compute (eager CPU)."""
import pytest
import torch

from lazy_mlir.ops.nn import avg_pool2d_backward

aten = torch.ops.aten


@pytest.mark.parametrize("shape,k,s,p,cip", [
    ((2, 3, 8, 8), [2, 2], [2, 2], [0, 0], True),
    ((1, 2, 9, 7), [3, 2], [2, 1], [1, 1], True),
    ((2, 1, 10, 10), [3, 3], [3, 3], [0, 0], False),
])
def test_avg_pool2d_backward(shape, k, s, p, cip):
    x = torch.randn(shape)
    out = aten.avg_pool2d.default(x, k, s, p, False, cip, None)
    g = torch.randn(out.shape)
    expected = aten.avg_pool2d_backward.default(g, x, k, s, p, False, cip, None)
    torch.testing.assert_close(avg_pool2d_backward(g, x, k, s, p, False, cip, None), expected)


@pytest.mark.parametrize("shape,k,s,p,ceil,cip,div", [
    ((1, 1, 5, 5), [2, 2], [2, 2], [0, 0], True, True, None),
    ((2, 3, 6, 7), [3, 3], [2, 2], [1, 1], True, False, None),
    ((2, 3, 6, 7), [3, 3], [2, 2], [1, 1], True, True, None),
    ((2, 2, 5, 5), [3, 3], [1, 1], [1, 1], False, True, 4),
    ((2, 2, 6, 6), [2, 2], [], [0, 0], False, True, None),
])
def test_avg_pool2d_backward_ceil_mode_and_divisors(shape, k, s, p, ceil, cip, div):
    """ceil_mode's shorter last windows, count_include_pad, divisor_override,
    the empty stride: each window's divisor as ATen's kernel takes it."""
    x = torch.randn(shape)
    out = aten.avg_pool2d.default(x, k, s, p, ceil, cip, div)
    g = torch.randn(out.shape)
    expected = aten.avg_pool2d_backward.default(g, x, k, s, p, ceil, cip, div)
    torch.testing.assert_close(avg_pool2d_backward(g, x, k, s, p, ceil, cip, div), expected)


def test_native_batch_norm_eval():
    from lazy_mlir.ops.nn import native_batch_norm
    x, w, b = torch.randn(2, 4, 3, 3), torch.randn(4), torch.randn(4)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    expected = aten.native_batch_norm.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0]
    out, mean, var = native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    torch.testing.assert_close(out, expected)
    assert mean.shape == var.shape == (4,)
    assert native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5) is NotImplemented
