"""The LU-family decompositions (``ops/linalg_lu.py``) run
eagerly against ATen's LAPACK kernels, and traced as capture plans (only ops
the dialect has, no value read). Nothing here compiles."""
from __future__ import annotations

import pytest
import torch
import torch.fx as fx

from lazy_mlir.ops import linalg_lu as D
from lazy_mlir.ops import linalg_matrix_exp as M
from lazy_mlir.graph import argtree
from lazy_mlir.lazy import decompose
from lazy_mlir.graph.ir import DeviceData, TensorSpec, Value

aten = torch.ops.aten
GEN = torch.Generator().manual_seed(3)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=GEN, dtype=dtype)


def same(got, exp, rtol=1e-4, atol=1e-5):
    got = got if isinstance(got, (tuple, list)) else (got,)
    exp = exp if isinstance(exp, (tuple, list)) else (exp,)
    assert len(got) == len(exp)
    for g, e in zip(got, exp):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, e.shape, g.dtype, e.dtype)
        if e.is_floating_point():
            torch.testing.assert_close(g, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert torch.equal(g, e), (g, e)


SHAPES = [(1, 1), (5, 5), (3, 5), (7, 5), (3, 4, 4), (2, 3, 6, 5), (0, 3, 3), (0, 0), (4, 0)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_lu_factor_lu_and_unpack(shape, dtype):
    a = randn(*shape, dtype=dtype)
    same(D.linalg_lu_factor_ex(a), torch.linalg.lu_factor_ex(a))
    same(D.linalg_lu(a), torch.linalg.lu(a))
    lu, piv = torch.linalg.lu_factor(a)
    same(D.lu_unpack(lu, piv), torch.lu_unpack(lu, piv))


def test_lu_factor_singular_like_lapack():
    a = randn(5, 4, 4)
    a[0] = 0
    a[1, :, 2] = 0
    a[2, 3] = a[2, 1]
    a[3] = torch.tensor([[0., 1, 2, 0], [0, 1, 5, 1], [0, 0, 0, 0], [1, 1, 1, 1]])
    a[4] = torch.tensor([[1., 2, 3, 4], [-1, 0, 2, 1], [1, 5, 1, 2], [-1, 1, 1, 1]])  # ties
    got, exp = D.linalg_lu_factor_ex(a), torch.linalg.lu_factor_ex(a)
    same(got, exp)
    assert exp[2].tolist()[:2] == [1, 3]


@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [True, False])
@pytest.mark.parametrize("batch", [(), (2,), (0,)])
def test_lu_solve(left, adjoint, batch):
    lu, piv = torch.linalg.lu_factor(randn(*batch, 5, 5))
    for k in (0, 1, 3):
        b = randn(*batch, 5, k) if left else randn(*batch, k, 5)
        same(D.linalg_lu_solve(lu, piv, b, left=left, adjoint=adjoint),
             torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint))


def test_lu_solve_broadcasts_batch():
    lu, piv = torch.linalg.lu_factor(randn(5, 5))
    b = randn(3, 5, 2)
    same(D.linalg_lu_solve(lu, piv, b), torch.linalg.lu_solve(lu, piv, b))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [True, False])
def test_solve_triangular_and_triangular_solve(upper, left, unit):
    a = randn(2, 5, 5) + 3 * torch.eye(5)
    b = randn(2, 5, 3) if left else randn(2, 3, 5)
    same(D.linalg_solve_triangular(a, b, upper=upper, left=left, unitriangular=unit),
         torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit))
    b = randn(5, 3)
    for transpose in (True, False):
        same(D.triangular_solve(b, a, upper, transpose, unit),
             tuple(torch.triangular_solve(b, a, upper, transpose, unit)))


def test_zero_diagonal_gives_trsm_inf_nan():
    t = torch.triu(randn(4, 4))
    t[2, 2] = 0
    b = randn(4, 2)
    got = D.linalg_solve_triangular(t, b, upper=True)
    exp = torch.linalg.solve_triangular(t, b, upper=True)
    assert not torch.isfinite(exp).all()
    same(got, exp)


@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("batch", [(), (2,), (0,), (2, 1)])
def test_solve_ex_and_inv_ex(contiguous, batch):
    a = randn(*batch, 5, 5)
    a = a if contiguous else a.mT
    for b in (randn(*batch, 5, 3), randn(*batch, 5), randn(5, 1)):
        same(D._linalg_solve_ex(a, b), aten._linalg_solve_ex(a, b), rtol=1e-3, atol=1e-4)
    b = randn(*batch, 2, 5)
    same(D._linalg_solve_ex(a, b, left=False), aten._linalg_solve_ex(a, b, left=False),
         rtol=1e-3, atol=1e-4)
    same(D.linalg_inv_ex(a), tuple(torch.linalg.inv_ex(a)), rtol=1e-3, atol=1e-4)


def test_singular_solve_and_inv_give_lapack_inf_nan():
    a = torch.tensor([[1., 2, 3], [2, 4, 6], [1, 1, 1]])
    b = randn(3, 2)
    same(D._linalg_solve_ex(a, b), aten._linalg_solve_ex(a, b))
    same(D.linalg_inv_ex(a), tuple(torch.linalg.inv_ex(a)))
    assert torch.linalg.inv_ex(a).info == 3


def test_empty_matrices():
    for shape in [(0, 0), (2, 0, 0)]:
        a = torch.zeros(shape)
        same(D.linalg_inv_ex(a), tuple(torch.linalg.inv_ex(a)))
        b = torch.zeros(shape[:-1] + (3,))
        same(D._linalg_solve_ex(a, b), aten._linalg_solve_ex(a, b))


def test_not_implemented_cases():
    big = randn(65, 65)
    assert D.linalg_lu_factor_ex(big) is NotImplemented
    assert D.linalg_inv_ex(big) is NotImplemented
    assert D.linalg_lu_factor_ex(randn(3, 3), pivot=False) is NotImplemented
    assert D.linalg_lu_factor_ex(randn(3, 3, dtype=torch.complex64)) is NotImplemented
    assert D.linalg_inv_ex(randn(3, 3), check_errors=True) is NotImplemented


def value(*shape, dtype=torch.float32):
    return Value.of_data(DeviceData(TensorSpec.of(torch.empty(shape, dtype=dtype))))


def plan(func, *args, **kwargs):
    flat, tree = argtree.flatten(args, kwargs)
    return decompose.plan(func, flat, tree)


@pytest.mark.parametrize("func,args,kwargs", [
    (aten.linalg_lu_factor_ex.default, (value(2, 4, 4),), {}),
    (aten.linalg_lu.default, (value(3, 5),), {}),
    (aten.lu_unpack.default, (value(2, 4, 6), value(2, 4, dtype=torch.int32)), {}),
    (aten.linalg_lu_solve.default, (value(4, 4), value(4, dtype=torch.int32), value(4, 2)),
     {"adjoint": True}),
    (aten._linalg_solve_ex.default, (value(2, 4, 4), value(2, 4)), {}),
    (aten.linalg_inv_ex.default, (value(4, 4),), {}),
    (aten.linalg_solve_triangular.default, (value(4, 4), value(2, 4)),
     {"upper": True, "left": False}),
    (aten.triangular_solve.default, (value(4, 2), value(4, 4)), {}),
])
def test_plans_capture_everything(func, args, kwargs):
    gm = plan(func, *args, **kwargs)
    assert isinstance(gm, fx.GraphModule), gm
    assert func not in {n.target for n in gm.graph.nodes}


def test_plan_refuses_above_the_limit():
    assert isinstance(plan(aten.linalg_lu_factor_ex.default, value(65, 65)), str)


@pytest.mark.parametrize("scale", [1e-8, 1e-4, 0.01, 0.2, 0.5, 1.0, 3.0, 40.0])
@pytest.mark.parametrize("shape", [(4, 4), (1, 5, 5), (3, 5, 5)])
def test_matrix_exp_as_aten(scale, shape):
    # Norms in every degree interval: one matrix picks its degree, a batch
    # always takes T18 with scaling and squaring (as ATen's CPU mexp).
    a = randn(*shape) * scale / shape[-1]
    same(M.linalg_matrix_exp(a), torch.linalg.matrix_exp(a), rtol=2e-6, atol=1e-7)


def test_matrix_exp_special_and_degenerate():
    a = randn(2, 4, 4)
    a[0, 1, 1] = float("nan")
    a[1, 0, 0] = float("inf")
    same(M.linalg_matrix_exp(a), torch.linalg.matrix_exp(a))  # all NaN, as eager
    for shape in [(0, 0), (2, 0, 0), (0, 3, 3), (3, 1, 1)]:
        a = randn(*shape)
        same(M.linalg_matrix_exp(a), torch.linalg.matrix_exp(a))
    assert M.linalg_matrix_exp(randn(3, 3, dtype=torch.float64)) is NotImplemented

