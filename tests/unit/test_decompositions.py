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


def test_avg_pool2d_backward_declines_what_it_does_not_cover():
    x = torch.randn(1, 1, 5, 5)
    g = torch.randn(1, 1, 3, 3)
    assert avg_pool2d_backward(g, x, [2, 2], [2, 2], [0, 0], True, True, None) is NotImplemented


def test_native_batch_norm_eval():
    from lazy_mlir.ops.nn import native_batch_norm
    x, w, b = torch.randn(2, 4, 3, 3), torch.randn(4), torch.randn(4)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    expected = aten.native_batch_norm.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0]
    out, mean, var = native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    torch.testing.assert_close(out, expected)
    assert mean.shape == var.shape == (4,)
    assert native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5) is NotImplemented
