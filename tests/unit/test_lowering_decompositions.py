"""The decompositions of ``ops/lowering.py`` compute what the ops
they replace compute (eager CPU, no compiler)."""
import pytest
import torch

from lazy_mlir.ops import registry
from lazy_mlir.ops.lowering import log10

aten = torch.ops.aten
# lowering.py's own entries (the full import table chains NaN handling over some).
LOWERING_DECOMPOSITIONS = {r.op: r.fn for r in registry.registered(registry.IMPORT)
                           if r.fn.__module__ == "lazy_mlir.ops.lowering"}


@pytest.mark.parametrize("op,args", [
    (aten.amax.default, ([0], True)), (aten.amin.default, ([-1], False)),
    (aten.argmax.default, (None, False)), (aten.argmin.default, (0, True)),
    (aten.all.dim, (0, False)), (aten.any.dim, (-1, True)),
    (aten.max.dim, (0, False)), (aten.min.dim, (0, True)),
    (aten.prod.dim_int, (0, False)), (aten.cumsum.default, (0,)),
    (aten.cumprod.default, (-1,)),
])
def test_rank0_reduction(op, args):
    x = torch.tensor(-1.25)
    got, expected = LOWERING_DECOMPOSITIONS[op](x, *args), op(x, *args)
    torch.testing.assert_close(got, expected)
    for g, e in zip(got if isinstance(got, tuple) else (got,),
                    expected if isinstance(expected, tuple) else (expected,)):
        assert g.shape == e.shape == () and g.dtype == e.dtype


def test_rank0_decomposition_declines_other_ranks():
    assert LOWERING_DECOMPOSITIONS[aten.amax.default](torch.ones(3), [0], False) is NotImplemented


def test_log10():
    x = torch.tensor([1e-30, 1e-3, 0.5, 1.0, 10.0, 1e6, 3e38, 0.0, -1.0, float("inf")])
    torch.testing.assert_close(log10(x), torch.log10(x), equal_nan=True)


def test_cumprod_with_dtype_converts_first():
    from lazy_mlir.ops.lowering import cumprod
    x = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float16)
    out = cumprod(x, 0, torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.cumprod(x, 0, dtype=torch.float32))


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce(reduce):
    from lazy_mlir.ops.lowering import scatter_reduce, scatter_value_reduce
    x, src = torch.randn(6, 4), torch.randn(5, 4)
    index = torch.tensor([[0, 1, 2, 3], [0, 0, 5, 5], [1, 1, 1, 1], [5, 4, 3, 2], [0, 5, 0, 5]])
    torch.testing.assert_close(scatter_reduce(x, 0, index, src, reduce),
                               aten.scatter.reduce(x, 0, index, src, reduce=reduce))
    torch.testing.assert_close(scatter_value_reduce(x, 0, index, 1.5, reduce),
                               aten.scatter.value_reduce(x, 0, index, 1.5, reduce=reduce))


@pytest.mark.parametrize("shape,offset,d1,d2", [((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1),
                                                ((5, 3), -1, 1, 0), ((2, 3, 4), 1, 2, 0)])
def test_diagonal_scatter(shape, offset, d1, d2):
    from lazy_mlir.ops.lowering import diagonal_scatter
    x = torch.randn(shape)
    src = torch.randn(torch.diagonal(x, offset, d1, d2).shape)
    torch.testing.assert_close(diagonal_scatter(x, src, offset, d1, d2),
                               torch.diagonal_scatter(x, src, offset, d1, d2))


@pytest.mark.parametrize("shape,size,stride,off", [((3, 3), (2, 2), (1, 2), 0),
                                                   ((3, 3), (2, 2), (1, 2), 1),
                                                   ((10,), (3,), (3,), 1), ((1,), (), (), 0)])
def test_as_strided_scatter(shape, size, stride, off):
    from lazy_mlir.ops.lowering import as_strided_scatter
    x, src = torch.randn(shape), torch.randn(size)
    torch.testing.assert_close(as_strided_scatter(x, src, size, stride, off),
                               torch.as_strided_scatter(x, src, size, stride, off))


def test_as_strided_scatter_declines_non_contiguous_and_what_eager_refuses():
    from lazy_mlir.ops.lowering import as_strided_scatter
    x = torch.randn(4, 4)
    assert as_strided_scatter(x.t(), torch.randn(2), (2,), (1,), 0) is NotImplemented
    assert as_strided_scatter(x, torch.randn(2, 2), (2, 2), (0, 1), 0) is NotImplemented


@pytest.mark.parametrize("shape,size,stride,off", [((4, 4), (2, 2), (1, 1), 0),
                                                   ((4,), (2, 3), (1, 1), 0),
                                                   ((2, 3, 4), (4, 3), (1, 4), 2)])
def test_as_strided_scatter_through_an_overlapping_view(shape, size, stride, off):
    """Each position holds the element eager's copy writes there last."""
    from lazy_mlir.ops.lowering import as_strided_scatter
    x = torch.randn(shape)
    src = torch.arange(torch.Size(size).numel(), dtype=torch.float32).reshape(size)
    torch.testing.assert_close(as_strided_scatter(x, src, size, stride, off),
                               torch.as_strided_scatter(x, src, size, stride, off),
                               rtol=0, atol=0)


@pytest.mark.parametrize("dtype,ceil_mode", [(torch.float32, True), (torch.int64, False)])
def test_max_pool2d_with_indices(dtype, ceil_mode):
    op = aten.max_pool2d_with_indices.default
    x = torch.randn(1, 2, 3, 6) if dtype.is_floating_point else torch.randint(-9, 9, (1, 2, 5, 6))
    got = LOWERING_DECOMPOSITIONS[op](x, [3, 3], [2, 2], [1, 1], [1, 1], ceil_mode)
    expected = op(x, [3, 3], [2, 2], [1, 1], [1, 1], ceil_mode)
    torch.testing.assert_close(got[0], expected[0])
    torch.testing.assert_close(got[1], expected[1])
    assert LOWERING_DECOMPOSITIONS[op](x.float(), [3, 3], [2, 2], [1, 1], [1, 1], False) \
        is NotImplemented


def test_erfinv():
    from lazy_mlir.ops.lowering import erfinv
    x = torch.cat([torch.linspace(-1, 1, 4001),
                   torch.tensor([1 - 1e-7, -0.0, 1e-30, 1.5, -2.0, float("nan")])])
    torch.testing.assert_close(erfinv(x), torch.erfinv(x), equal_nan=True)
    torch.testing.assert_close(erfinv(torch.tensor([0, 1, -1, 2])),
                               torch.erfinv(torch.tensor([0, 1, -1, 2])), equal_nan=True)
    assert erfinv(torch.zeros(2, dtype=torch.float64)) is NotImplemented


def test_unbatched_max_pool_and_max_pool2d_ceil_mode():
    for op in (aten.max_pool2d.default, aten.max_pool2d_with_indices.default):
        for x, ceil in ((torch.randn(4, 5, 7), False), (torch.randn(2, 4, 5, 7), True)):
            got = LOWERING_DECOMPOSITIONS[op](x, [2, 2], [2, 1], [1, 1], [1, 1], ceil)
            torch.testing.assert_close(got, op(x, [2, 2], [2, 1], [1, 1], [1, 1], ceil))


def test_avg_pool3d_cuts_the_unused_tail():
    from lazy_mlir.ops.lowering import avg_pool3d
    x = torch.randn(2, 3, 3, 4, 5)
    for cip in (True, False):
        torch.testing.assert_close(avg_pool3d(x, [2, 2, 2], [2, 2, 2], [0], False, cip),
                                   aten.avg_pool3d.default(x, [2, 2, 2], [2, 2, 2], [0], False, cip))
    assert avg_pool3d(x, [2, 2, 2], [], [1], False) is NotImplemented


@pytest.mark.parametrize("x,dim", [
    (torch.randn(5, 5, 5) * 1e4, 0), (torch.randn(3, 4), -1), (torch.tensor(3.0), 0),
    (torch.tensor([-1e4, 1e4, float("-inf"), 3.0, float("inf"), float("nan")]), 0),
    (torch.tensor([float("-inf"), float("-inf"), 1.0]), 0),
])
def test_logcumsumexp_large_values(x, dim):
    from lazy_mlir.ops.precise import logcumsumexp
    torch.testing.assert_close(logcumsumexp(x, dim), torch.logcumsumexp(x, dim), equal_nan=True)


@pytest.mark.parametrize("x", [torch.tensor([[0, 1.0], [2, 0]]), torch.randint(0, 2, (3, 4, 5)),
                               torch.zeros(4), torch.tensor([True, False, True]),
                               torch.tensor(2.0), torch.zeros(0, 3)])
@pytest.mark.parametrize("size,fill", [(0, -1), (3, -1), (70, 5)])
def test_nonzero_static(x, size, fill):
    from lazy_mlir.ops.lowering import nonzero_static
    torch.testing.assert_close(nonzero_static(x, size=size, fill_value=fill),
                               torch.nonzero_static(x, size=size, fill_value=fill))


def test_fmax_fmin():
    a = torch.tensor([[1.0, float("nan"), -2.0]])
    b = torch.tensor([[0.5], [float("nan")]])
    i = torch.tensor([3, -4])
    for op, ref in ((aten.fmax.default, torch.fmax), (aten.fmin.default, torch.fmin)):
        torch.testing.assert_close(LOWERING_DECOMPOSITIONS[op](a, b), ref(a, b), equal_nan=True)
        torch.testing.assert_close(LOWERING_DECOMPOSITIONS[op](i, i.flip(0)), ref(i, i.flip(0)))
        torch.testing.assert_close(LOWERING_DECOMPOSITIONS[op](i, a.T), ref(i, a.T), equal_nan=True)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0, 3), (2, -1), (0.6, 0.2), (1.7, -2.9)])
def test_addbmm_integers(beta, alpha):
    from lazy_mlir.ops.lowering import addbmm
    x, b1, b2 = (torch.randint(-9, 9, s) for s in ((1,), (4, 2, 3), (4, 3, 5)))
    torch.testing.assert_close(addbmm(x, b1, b2, beta=beta, alpha=alpha),
                               torch.addbmm(x, b1, b2, beta=beta, alpha=alpha))
    assert addbmm(x.float(), b1.float(), b2.float()) is NotImplemented
