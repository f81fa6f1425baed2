"""Cholesky and Householder QR compile through the capture decompositions
(``dialects/linalg_cholesky_decompositions.py``, ``linalg_qr_decompositions.py``)
and match eager: batched, upper/lower, wide/tall, the partial output and
``info`` of a matrix that is not positive definite, rank-deficient QR, empty
and non-contiguous inputs; matrices above 64 fall back."""
from __future__ import annotations

import math

import pytest
import torch

from e2e_helpers import Counters, assert_lazy_close, lazy

TOL = dict(rtol=1e-4, atol=1e-5)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _pd(*batch, n, seed=0):
    b = torch.randn(*batch, n, n, generator=_gen(seed))
    return b @ b.mT + 0.5 * torch.eye(n)


def _no_fallback(c, *ops):
    for op in ops:
        assert c.delta("decomposed::" + op) >= 1, op
        assert c.delta("aten::" + op) == 0, op


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_ex_info_and_partial_output(upper):
    a = _pd(3, n=6, seed=1)
    a[1, 3, 3] -= 100.0  # leading minor of order 4 not positive definite
    a[2, 0, 0] = -1.0  # fails at once: info 1
    a[2, 4, 1] = a[2, 1, 4] = 7.0  # entries LAPACK never reached stay as they are
    c = Counters()
    L, info = torch.linalg.cholesky_ex(lazy(a), upper=upper)
    eL, einfo = torch.linalg.cholesky_ex(a, upper=upper)
    assert einfo.tolist() == [0, 4, 1]
    assert_lazy_close(info, einfo)
    assert_lazy_close(L, eL, **TOL)
    _no_fallback(c, "linalg_cholesky_ex")


def test_cholesky_reads_one_triangle_and_nan_pivot():
    a = _pd(2, n=4, seed=2)
    a[0, 0, 3] = 50.0  # the upper triangle is not the lower one's mirror
    a[1, 2, 1] = math.nan  # a NaN pivot two columns on: info 3
    c = Counters()
    lo, hi = lazy(a), lazy(a.clone())
    outs = [torch.linalg.cholesky_ex(lo), torch.linalg.cholesky_ex(hi, upper=True)]
    for (L, info), upper in zip(outs, (False, True)):
        eL, einfo = torch.linalg.cholesky_ex(a, upper=upper)
        assert_lazy_close(info, einfo)
        assert_lazy_close(L, eL, equal_nan=True, **TOL)
    assert outs[0][1].cpu().tolist() == [0, 3]
    _no_fallback(c, "linalg_cholesky_ex")


@pytest.mark.slow  # CI time (~60 s on 2 cores); cholesky_ex's info and partial output stay
def test_cholesky_solve_inverse_and_old_cholesky():
    a = _pd(2, n=5, seed=3)
    b = torch.randn(1, 5, 3, generator=_gen(4))  # batch broadcast against the factor
    c = Counters()
    la, lb = lazy(a), lazy(b)
    f_lo, f_up = torch.cholesky(la), torch.cholesky(la, upper=True)
    solves = [torch.cholesky_solve(lb, f_lo), torch.cholesky_solve(lb, f_up, upper=True)]
    invs = [torch.cholesky_inverse(f_lo), torch.cholesky_inverse(f_up, upper=True)]
    ef_lo, ef_up = torch.cholesky(a), torch.cholesky(a, upper=True)
    assert_lazy_close(f_lo, ef_lo, **TOL)
    assert_lazy_close(f_up, ef_up, **TOL)
    assert_lazy_close(solves[0], torch.cholesky_solve(b, ef_lo), **TOL)
    assert_lazy_close(solves[1], torch.cholesky_solve(b, ef_up, upper=True), **TOL)
    assert_lazy_close(invs[0], torch.cholesky_inverse(ef_lo), **TOL)
    assert_lazy_close(invs[1], torch.cholesky_inverse(ef_up, upper=True), **TOL)
    assert torch.allclose(solves[0].cpu(), torch.linalg.solve(a, b.expand(2, 5, 3)), atol=1e-4)
    _no_fallback(c, "cholesky", "cholesky_solve", "cholesky_inverse")


def test_errors_eager_raises_come_out_nan():
    """No error can be raised from a compiled graph: where eager raises, the
    matrix is NaN (the other batch elements are right)."""
    a = _pd(2, n=3, seed=5)
    a[1, 2, 2] = -5.0
    with pytest.raises(RuntimeError):
        torch.cholesky(a)
    f = torch.linalg.cholesky(a[:1]).expand(2, 3, 3).clone()
    f[1, 1, 1] = 0.0
    with pytest.raises(RuntimeError):
        torch.cholesky_inverse(f)
    out, inv = torch.cholesky(lazy(a)).cpu(), torch.cholesky_inverse(lazy(f)).cpu()
    torch.testing.assert_close(out[0], torch.cholesky(a[0]), **TOL)
    torch.testing.assert_close(inv[0], torch.cholesky_inverse(f[0]), **TOL)
    assert out[1].isnan().all() and inv[1].isnan().all()


def test_cholesky_empty_noncontiguous_and_too_big():
    a = _pd(n=4, seed=6)
    c = Counters()
    for x in (torch.zeros(0, 3, 3), torch.zeros(2, 0, 0), a.mT):  # a.mT: a transposed view
        L, info = torch.linalg.cholesky_ex(lazy(x))
        eL, einfo = torch.linalg.cholesky_ex(x)
        assert_lazy_close(L, eL, **TOL)
        assert_lazy_close(info, einfo)
    big = _pd(n=65, seed=7)
    L, _ = torch.linalg.cholesky_ex(lazy(big))
    torch.testing.assert_close(L.cpu(), torch.linalg.cholesky_ex(big)[0], **TOL)
    assert c.delta("aten::linalg_cholesky_ex") == 1  # only the 65 x 65 one fell back


# ------------------------------------------------------------------ QR
@pytest.mark.parametrize("shape,modes", [((2, 4, 3), ("complete",)),
                                         pytest.param((2, 3, 4), ("reduced", "r"),
                                                      marks=pytest.mark.slow)])
def test_geqrf_and_qr_modes(shape, modes):
    a = torch.randn(shape, generator=_gen(8))
    c = Counters()
    la = lazy(a)
    ref, tau = torch.geqrf(la)
    qrs = {mode: torch.linalg.qr(la, mode=mode) for mode in modes}
    eref, etau = torch.geqrf(a)
    assert_lazy_close(ref, eref, **TOL)
    assert_lazy_close(tau, etau, **TOL)
    for mode, (q, r) in qrs.items():
        eq, er = torch.linalg.qr(a, mode=mode)
        assert_lazy_close(r, er, **TOL)
        assert_lazy_close(q, eq, **TOL)
    _no_fallback(c, "geqrf", "linalg_qr")


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_qr_rank_deficient_triangular_and_signed_zero():
    """Exactly-zero parts below the diagonal give tau = 0 and keep the
    column (a negative diagonal stays negative); -0.0 counts as positive."""
    zero_col = torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 1.0], [2.0, 0.0, 5.0], [1.0, 0.0, 1.0]])
    tri = torch.tensor([[-2.0, 1.0, 4.0], [0.0, -3.0, 1.0], [0.0, 0.0, 0.5], [0.0, 0.0, 0.0]])
    signed = torch.tensor([[-0.0, 1.0, 2.0], [3.0, 2.0, 1.0], [1.0, 1.0, 1.0], [0.0, 2.0, 1.0]])
    a = torch.stack([zero_col, tri, signed])
    c = Counters()
    ref, tau = torch.geqrf(lazy(a))
    q, r = torch.linalg.qr(lazy(a))
    eref, etau = torch.geqrf(a)
    assert etau[1].tolist() == [0.0, 0.0, 0.0] and etau[0, 1] == 0.0
    assert_lazy_close(ref, eref, **TOL)
    assert_lazy_close(tau, etau, **TOL)
    eq, er = torch.linalg.qr(a)
    assert_lazy_close(q, eq, **TOL)
    assert_lazy_close(r, er, **TOL)
    _no_fallback(c, "geqrf", "linalg_qr")


@pytest.mark.slow  # CI time (~20 s on 2 cores)
def test_householder_product_and_ormqr():
    a = torch.randn(2, 4, 3, generator=_gen(9))
    tau2, tau3 = torch.randn(2, 2, generator=_gen(10)), torch.randn(2, 3, generator=_gen(15))
    cl, cr = torch.randn(2, 4, 2, generator=_gen(11)), torch.randn(2, 2, 4, generator=_gen(12))
    c = Counters()
    la = lazy(a)
    h = torch.linalg.householder_product(la, lazy(tau2))  # fewer reflectors than columns
    outs = {(left, tr): torch.ormqr(la, lazy(tau3), lazy(cl if left else cr), left, tr)
            for left in (True, False) for tr in (True, False)}
    assert_lazy_close(h, torch.linalg.householder_product(a, tau2), **TOL)
    for (left, tr), out in outs.items():
        assert_lazy_close(out, torch.ormqr(a, tau3, cl if left else cr, left, tr), **TOL)
    _no_fallback(c, "linalg_householder_product", "ormqr")


def test_qr_empty_and_too_big():
    c = Counters()
    for x, mode in ((torch.zeros(0, 4, 3), "reduced"), (torch.zeros(2, 0, 3), "complete"),
                    (torch.zeros(3, 0), "complete")):
        q, r = torch.linalg.qr(lazy(x), mode=mode)
        eq, er = torch.linalg.qr(x, mode=mode)
        # Folded at capture from shapes alone (not ours): values, not strides.
        torch.testing.assert_close(q.cpu(), eq, **TOL)
        torch.testing.assert_close(r.cpu(), er, **TOL)
    big = torch.randn(65, 3, generator=_gen(14))
    torch.testing.assert_close(torch.geqrf(lazy(big))[1].cpu(), torch.geqrf(big)[1], **TOL)
    assert c.delta("aten::geqrf") == 1  # only the 65-row one fell back
