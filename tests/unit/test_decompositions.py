"""Our decompositions compute what the ops they replace compute (eager CPU)."""
import pytest
import torch

from lazy_mlir.dialects.decompositions import avg_pool2d_backward

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
