"""Our decompositions compute what the ops they replace compute (eager CPU)."""
import pytest
import torch

from lazy_mlir.ops.nn import (adaptive_max_pool2d_backward, adaptive_max_pool3d_backward,
                              avg_pool2d, avg_pool2d_backward)

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


@pytest.mark.parametrize("shape,k,s,p,cip,div", [
    ((2, 3, 3, 5), [3, 2], [3, 2], [0, 0], True, None),    # one axis with a last partial window
    ((2, 3, 6, 5), [3, 2], [2, 2], [1, 1], False, 3),      # padding excluded, a divisor
    ((2, 3, 6, 7), [3, 3], [2, 2], [1, 1], True, None),
    ((2, 3, 4, 9), [5, 1], [1, 3], [1, 0], False, None),
    ((2, 3, 1, 1), [320, 320], [], [0, 0], True, None),    # EfficientNet's pooler
    ((3, 5, 5), [2, 2], [], [0, 0], True, None),           # unbatched
])
def test_avg_pool2d_ceil_mode_unbatched_and_long_kernels(shape, k, s, p, cip, div):
    """ceil_mode's partial last windows as sums times ATen's divisors, an
    unbatched input batched, a kernel past its padded input cut to it: each
    as the op computes it. (Applied again until the op is kept, as before
    import.)"""
    x = torch.randn(shape)
    got = avg_pool2d(x, k, s, p, True, cip, div)
    assert got is not NotImplemented
    torch.testing.assert_close(got, aten.avg_pool2d.default(x, k, s, p, True, cip, div))


@pytest.mark.parametrize("shape,out", [((2, 3, 7, 5), (3, 2)), ((3, 7, 5), (3, 2)),
                                       ((2, 3, 4, 6, 5), (2, 3, 2)), ((1, 2, 5, 5), (4, 4))])
def test_adaptive_max_pool_backward(shape, out):
    """Overlapping windows (7 -> 3, 5 -> 4) add at a shared maximum, as the op does."""
    x = torch.randn(shape)
    pool = (torch.nn.AdaptiveMaxPool2d if len(out) == 2 else torch.nn.AdaptiveMaxPool3d)(
        out, return_indices=True)
    y, indices = pool(x)
    g = torch.randn(y.shape)
    op, ours = ((aten.adaptive_max_pool2d_backward, adaptive_max_pool2d_backward) if len(out) == 2
                else (aten.adaptive_max_pool3d_backward, adaptive_max_pool3d_backward))
    torch.testing.assert_close(ours(g, x, indices), op.default(g, x, indices))


@pytest.mark.parametrize("mode,weighted,padding_idx,last", [
    (0, False, -1, False), (0, True, -1, True), (0, True, 3, False), (1, False, -1, True),
    (1, False, 3, False)])
def test_embedding_bag_backward(mode, weighted, padding_idx, last):
    """Sum (its fast path's offset2bag empty) and mean bags, per-sample
    weights, a padding index, a last offset: the dense weight gradient."""
    from lazy_mlir.ops.embedding_bag import embedding_bag_backward
    w = torch.randn(10, 4)
    idx, off = torch.tensor([1, 3, 3, 7, 0, 9, 3, 2]), torch.tensor([0, 2, 2, 5] + [8] * last)
    psw = torch.randn(8) if weighted else None
    out, o2b, size, maxi = aten._embedding_bag.default(w, idx, off, False, mode, False, psw, last,
                                                       padding_idx)
    g = torch.randn(out.shape)
    args = (g, idx, off, o2b, size, maxi, 10, False, mode, False, psw, padding_idx)
    torch.testing.assert_close(embedding_bag_backward(*args),
                               aten._embedding_bag_backward.default(*args))


def test_native_batch_norm_eval():
    from lazy_mlir.ops.nn import native_batch_norm
    x, w, b = torch.randn(2, 4, 3, 3), torch.randn(4), torch.randn(4)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    expected = aten.native_batch_norm.default(x, w, b, rm, rv, False, 0.1, 1e-5)[0]
    out, mean, var = native_batch_norm(x, w, b, rm, rv, False, 0.1, 1e-5)
    torch.testing.assert_close(out, expected)
    assert mean.shape == var.shape == (4,)
    assert native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5) is NotImplemented
