"""The decompositions of ``lowering_decompositions.py`` compute what the ops
they replace compute (eager CPU, no compiler)."""
import pytest
import torch

from lazy_mlir.dialects.lowering_decompositions import LOWERING_DECOMPOSITIONS, log10

aten = torch.ops.aten


@pytest.mark.parametrize("op,args", [
    (aten.amax.default, ([0], True)), (aten.amin.default, ([-1], False)),
    (aten.argmax.default, (None, False)), (aten.argmin.default, (0, True)),
    (aten.all.dim, (0, False)), (aten.any.dim, (-1, True)),
    (aten.max.dim, (0, False)), (aten.min.dim, (0, True)),
    (aten.prod.dim_int, (0, False)), (aten.cumsum.default, (0,)),
    (aten.cumprod.default, (-1,)), (aten.logcumsumexp.default, (0,)),
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
    from lazy_mlir.dialects.lowering_decompositions import cumprod
    x = torch.tensor([1.5, -2.0, 3.0], dtype=torch.float16)
    out = cumprod(x, 0, torch.float32)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, torch.cumprod(x, 0, dtype=torch.float32))
