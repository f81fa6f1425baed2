"""The LU family and triangular solves (``dialects/linalg_lu_decompositions.py``)
compiled on the lazy device against eager CPU: batched, singular (LAPACK's
info, pivots and inf/NaN), 1x1, empty and non-contiguous inputs, and the
size limit above which they fall back."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import lazy

GEN = torch.Generator().manual_seed(7)


def randn(*shape):
    return torch.randn(*shape, generator=GEN)


def close(actual, expected, **kw):
    """Values (NaN and inf where eager has them), dtype and shape."""
    actual = actual.cpu()
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    if expected.is_floating_point():
        torch.testing.assert_close(actual, expected, equal_nan=True,
                                   **(kw or dict(rtol=1e-4, atol=1e-5)))
    else:
        assert torch.equal(actual, expected), (actual, expected)


def singular_batch():
    """Regular and singular 4x4 matrices, one batch: a zero matrix, a zero
    column, two equal rows, a rank-one matrix, a tie for the pivot."""
    a = randn(6, 4, 4)
    a[1] = 0
    a[2, :, 1] = 0
    a[3, 2] = a[3, 0]
    # Rank one with power-of-two ratios: the elimination cancels exactly in
    # any rounding (with or without fused multiply-adds), as in LAPACK. A
    # matrix singular only up to rounding (outer(randn, randn)) may get
    # another info: eager's zero pivot is then a rounding accident.
    a[4] = torch.outer(torch.tensor([1., 2, -4, 0.5]), torch.tensor([3., -1, 2, 5]))
    a[5] = torch.tensor([[1., 2, 3, 4], [-1, 0, 2, 1], [1, 5, 1, 2], [-1, 1, 1, 1]])
    return a


def test_lu_factor_ex_batched_singular_and_pivots_exact(counters):
    a = singular_batch()
    lu, piv, info = torch.linalg.lu_factor_ex(lazy(a))
    elu, epiv, einfo = torch.linalg.lu_factor_ex(a)
    close(piv, epiv)
    close(info, einfo)
    assert einfo[1:3].tolist() == [1, 2] and einfo[0] == 0  # the test covers singular ones
    close(lu, elu)
    assert counters.delta("decomposed::linalg_lu_factor_ex") == 1
    assert counters.delta("aten::linalg_lu_factor_ex") == 0


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_lu_factor_rectangular_and_non_contiguous():
    cases = []
    for shape in [(1, 1), (3, 5), (6, 4)]:
        a = randn(2, shape[1], shape[0]).mT  # a transposed view
        assert a.is_contiguous() == (shape == (1, 1))
        cases += zip(torch.linalg.lu_factor_ex(lazy(a)), torch.linalg.lu_factor_ex(a))
    for got, exp in cases:
        close(got, exp)


def test_linalg_lu_and_lu_unpack():
    a = randn(3, 5, 4)
    for got, exp in zip(torch.linalg.lu(lazy(a)), torch.linalg.lu(a)):
        close(got, exp)
    lu, piv = torch.linalg.lu_factor(randn(2, 4, 6))
    for got, exp in zip(torch.lu_unpack(lazy(lu), lazy(piv)), torch.lu_unpack(lu, piv)):
        close(got, exp)


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_lu_solve_left_right_adjoint():
    # All four variants built before any is read: one graph.
    lu, piv = torch.linalg.lu_factor(randn(2, 5, 5))
    cases = []
    for left in (True, False):
        for adjoint in (True, False):
            b = randn(2, 5, 3) if left else randn(2, 3, 5)
            got = torch.linalg.lu_solve(lazy(lu), lazy(piv), lazy(b), left=left, adjoint=adjoint)
            cases.append((got, torch.linalg.lu_solve(lu, piv, b, left=left, adjoint=adjoint)))
    for got, exp in cases:
        close(got, exp)


def test_solve_inv_singular_gives_lapack_inf_nan_and_info(counters):
    a = singular_batch()
    b = randn(6, 4, 2)
    x, info = torch.linalg.solve_ex(lazy(a), lazy(b))
    ex, einfo = torch.linalg.solve_ex(a, b)
    inv, iinfo = torch.linalg.inv_ex(lazy(a))
    einv, eiinfo = torch.linalg.inv_ex(a)
    close(info, einfo)
    close(iinfo, eiinfo)
    assert not torch.isfinite(ex[1:3]).all()  # singular: inf/NaN as LAPACK leaves them
    # Regular members up to rounding; singular ones with the same inf/NaN
    # pattern (the finite garbage of a rank-deficient factor is ill-conditioned).
    close(x[0], ex[0], rtol=1e-3, atol=1e-4)
    close(inv[0], einv[0], rtol=1e-3, atol=1e-4)
    for got, exp in ((x.cpu()[1:3], ex[1:3]), (inv.cpu()[1:3], einv[1:3])):
        assert torch.equal(torch.isnan(got), torch.isnan(exp))
        assert torch.equal(torch.isposinf(got), torch.isposinf(exp))
        assert torch.equal(torch.isneginf(got), torch.isneginf(exp))
    assert counters.delta("aten::_linalg_solve_ex") == 0
    assert counters.delta("aten::linalg_inv_ex") == 0


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_solve_vector_rhs_right_and_non_contiguous():
    a = randn(3, 4, 4)
    b = randn(3, 4)
    close(torch.linalg.solve(lazy(a.mT), lazy(b)), torch.linalg.solve(a.mT, b))
    br = randn(3, 2, 4)
    close(torch.linalg.solve(lazy(a), lazy(br), left=False), torch.linalg.solve(a, br, left=False))
    one = randn(1, 1)
    close(torch.linalg.inv(lazy(one)), torch.linalg.inv(one))


@pytest.mark.slow  # CI time (~40 s on 2 cores); the transposed/broadcast/zero-diagonal test stays
def test_solve_triangular_all_variants():
    a = randn(2, 5, 5) + 3 * torch.eye(5)
    cases = []
    for upper in (True, False):
        for left in (True, False):
            b = randn(2, 5, 2) if left else randn(2, 2, 5)
            for unit in (True, False):
                kw = dict(upper=upper, left=left, unitriangular=unit)
                cases.append((torch.linalg.solve_triangular(lazy(a), lazy(b), **kw),
                              torch.linalg.solve_triangular(a, b, **kw)))
    for got, exp in cases:
        close(got, exp)


def test_triangular_solve_transposed_broadcast_and_zero_diagonal():
    a = randn(5, 5) + 3 * torch.eye(5)
    a[3, 3] = 0  # singular: inf/NaN as trsm gives them
    b = randn(2, 5, 3)
    got = torch.triangular_solve(lazy(b), lazy(a), upper=False, transpose=True)
    exp = torch.triangular_solve(b, a, upper=False, transpose=True)
    close(got[0], exp[0])
    close(got[1], exp[1])


@pytest.mark.parametrize("shape", [(0, 0), (0, 3, 3), (2, 0, 0)])
def test_empty(shape):
    a = torch.zeros(shape)
    for got, exp in zip(torch.linalg.lu_factor_ex(lazy(a)), torch.linalg.lu_factor_ex(a)):
        close(got, exp)
    b = torch.zeros(shape[:-1] + (2,))
    close(torch.linalg.solve(lazy(a), lazy(b)), torch.linalg.solve(a, b))
    close(torch.linalg.inv(lazy(a)), torch.linalg.inv(a))


def test_above_the_size_limit_falls_back(counters):
    a = randn(65, 65)
    for got, exp in zip(torch.linalg.lu_factor_ex(lazy(a)), torch.linalg.lu_factor_ex(a)):
        close(got, exp)
    assert counters.delta("aten::linalg_lu_factor_ex") == 1

