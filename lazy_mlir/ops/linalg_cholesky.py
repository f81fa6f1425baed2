"""Cholesky factorisation and the solves built on it, unrolled over the
(static, small) matrix size in aten ops the torch dialect has: torch-mlir has
no LAPACK ops, so without these ``cholesky``, ``linalg.cholesky(_ex)``,
``cholesky_inverse`` and ``cholesky_solve`` run eagerly.

Guarantees (float32/float64, any batch shape, matrices up to
``MAX_DIM`` x ``MAX_DIM``; anything else returns ``NotImplemented`` and falls
back to eager):

- ``linalg_cholesky_ex`` follows LAPACK's unblocked ``potf2`` (what eager's
  MKL ``potrf`` gives at these sizes): only the lower (``upper=False``) or
  upper triangle of the input is read; ``info`` is the order of the first
  leading minor that is not positive definite (a non-positive or NaN pivot),
  0 if none; on failure at column j (0-based) the output holds the factor's
  columns < j, the failed pivot ``a_jj - sum(l_jk^2)`` on the diagonal and
  the input's own entries in the rest of the triangle, as LAPACK leaves them.
- ``cholesky`` and ``cholesky_inverse`` raise in eager on a matrix that is
  not positive definite / a factor with a zero pivot; an error cannot be
  raised from a compiled graph, so the whole matrix comes out NaN instead
  (never a plausible-looking wrong answer).
- ``cholesky_solve`` (``potrs``) has no error: a zero pivot gives infinities
  or NaNs as eager's triangular solves do.
- Results equal eager up to rounding (different summation order), in
  LAPACK's column-major strides.
"""
from __future__ import annotations

import math

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

# Largest matrix dimension unrolled: the graph grows with n (one step per
# column, each O(n^2) elementwise work), so bigger matrices fall back.
MAX_DIM = 64
_FLOATS = (torch.float32, torch.float64)


def _ok(*tensors) -> bool:
    """Real floating point, matrices no larger than ``MAX_DIM``."""
    return all(t.dtype in _FLOATS and t.dim() >= 2 and max(t.shape[-2:]) <= MAX_DIM
               for t in tensors)


def fortran(x):
    """``x`` with LAPACK's column-major strides in its last two dims (what
    eager's linalg outputs have)."""
    t = aten.transpose.int(x, -2, -1)
    return aten.transpose.int(aten.clone.default(t, memory_format=torch.contiguous_format),
                              -2, -1)


def index_masks(n, device):
    """(rows, cols) int64 index grids of an n x n matrix, for the masks the
    unrolled loops select with (computed once, folded by the compiler)."""
    r = aten.arange.default(n, dtype=torch.int64, device=device)
    return aten.unsqueeze.default(r, -1), aten.unsqueeze.default(r, 0)


def _full(shape, value, like, dtype=None):
    return aten.full.default(list(shape), value, dtype=dtype or like.dtype, device=like.device)


def cholesky_lower(a):
    """(L, info) of LAPACK ``potf2('L')`` on ``a`` (..., n, n), reading only
    its lower triangle; see the module docstring for the failure output."""
    n = a.shape[-1]
    batch = list(a.shape[:-2])
    rows, cols = index_masks(n, a.device)
    a_low = aten.where.self(aten.ge.Tensor(rows, cols), a, _full((), 0.0, a))
    L = _full(a.shape, 0.0, a)
    info = _full(batch, 0, a, dtype=torch.int32)
    failed = _full(batch, False, a, dtype=torch.bool)
    r1 = aten.squeeze.dim(rows, -1)  # (n,)
    for j in range(n):
        col = aten.select.int(a_low, -1, j)  # (..., n), zero above the diagonal
        if j:
            # Row j of L is zero in columns >= j: L @ L[j] sums over k < j only.
            lj = aten.unsqueeze.default(aten.select.int(L, -2, j), -1)
            col = aten.sub.Tensor(col, aten.squeeze.dim(aten.matmul.default(L, lj), -1))
        d = aten.select.int(col, -1, j)
        bad = aten.logical_or.default(aten.le.Scalar(d, 0), aten.isnan.default(d))
        new_fail = aten.logical_and.default(bad, aten.logical_not.default(failed))
        info = aten.where.self(new_fail, _full((), j + 1, a, dtype=torch.int32), info)
        s = aten.sqrt.default(d)
        good = aten.div.Tensor(col, aten.unsqueeze.default(s, -1))
        diag = aten.eq.Scalar(r1, j)
        good = aten.where.self(diag, aten.unsqueeze.default(s, -1), good)
        # Failure here: the pivot on the diagonal, the input below it.
        orig = aten.select.int(a_low, -1, j)
        fail_col = aten.where.self(diag, aten.unsqueeze.default(d, -1), orig)
        out = aten.where.self(aten.unsqueeze.default(new_fail, -1), fail_col, good)
        # Failed earlier: LAPACK never reached this column.
        out = aten.where.self(aten.unsqueeze.default(failed, -1), orig, out)
        out = aten.where.self(aten.lt.Scalar(r1, j), _full((), 0.0, a), out)
        L = aten.where.self(aten.eq.Scalar(cols, j), aten.unsqueeze.default(out, -1), L)
        failed = aten.logical_or.default(failed, bad)
    return L, info


def _factor(a, upper):
    """``potf2`` with ``upper``: the upper triangle of a is the lower
    triangle of its transpose, and U = L^T."""
    if upper:
        L, info = cholesky_lower(aten.transpose.int(a, -2, -1))
        return aten.transpose.int(L, -2, -1), info
    return cholesky_lower(a)


@register_decomposition(aten.linalg_cholesky_ex.default, scope=CAPTURE)
def linalg_cholesky_ex(a, *, upper=False, check_errors=False):
    """``torch.linalg.cholesky_ex``; ``check_errors=True`` (an error raised
    from a value) falls back."""
    if check_errors or not _ok(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    L, info = _factor(a, upper)
    return fortran(L), info


@register_decomposition(aten.cholesky.default, scope=CAPTURE)
def cholesky(a, upper=False):
    """``torch.cholesky``: NaN where eager would raise (not positive
    definite)."""
    if not _ok(a) or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    L, info = _factor(a, upper)
    bad = aten.unsqueeze.default(aten.unsqueeze.default(aten.ne.Scalar(info, 0), -1), -1)
    return fortran(aten.where.self(bad, _full((), math.nan, a), L))


def solve_triangular(t, b, lower):
    """X with T X = B by substitution, T (..., n, n) read only in its lower
    (or upper) triangle, B (..., n, k) with the same batch shape."""
    n = t.shape[-1]
    rows, cols = index_masks(n, t.device)
    strict = aten.gt.Tensor(rows, cols) if lower else aten.lt.Tensor(rows, cols)
    t_off = aten.where.self(strict, t, _full((), 0.0, t))
    diag = aten.diagonal.default(t, 0, -2, -1)  # (..., n)
    x = _full(b.shape, 0.0, b)
    r1 = aten.squeeze.dim(rows, -1)
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        # Rows of x not solved yet are zero: the row product sums the solved ones.
        ti = aten.unsqueeze.default(aten.select.int(t_off, -2, i), -2)  # (..., 1, n)
        r = aten.sub.Tensor(aten.select.int(b, -2, i),
                            aten.squeeze.dim(aten.matmul.default(ti, x), -2))
        xi = aten.div.Tensor(r, aten.unsqueeze.default(aten.select.int(diag, -1, i), -1))
        x = aten.where.self(aten.unsqueeze.default(aten.eq.Scalar(r1, i), -1),
                            aten.unsqueeze.default(xi, -2), x)
    return x


def _lower_factor(f, upper):
    """The lower factor L (A = L L^T) of the factor ``f`` eager was given."""
    return aten.transpose.int(f, -2, -1) if upper else f


@register_decomposition(aten.cholesky_solve.default, scope=CAPTURE)
def cholesky_solve(b, f, upper=False):
    """``torch.cholesky_solve(B, F)``: A^-1 B for A = F F^T (F^T F if
    ``upper``), batch dims broadcast."""
    if not _ok(b, f) or f.shape[-1] != f.shape[-2] or b.shape[-2] != f.shape[-1] \
            or b.dtype != f.dtype:
        return NotImplemented
    try:
        batch = list(torch.broadcast_shapes(b.shape[:-2], f.shape[:-2]))
    except RuntimeError:
        return NotImplemented
    b = aten.expand.default(b, batch + list(b.shape[-2:]))
    f = aten.expand.default(f, batch + list(f.shape[-2:]))
    L = _lower_factor(f, upper)
    y = solve_triangular(L, b, lower=True)
    return fortran(solve_triangular(aten.transpose.int(L, -2, -1), y, lower=False))


@register_decomposition(aten.cholesky_inverse.default, scope=CAPTURE)
def cholesky_inverse(f, upper=False):
    """``torch.cholesky_inverse(F)``: (F F^T)^-1 (``potri``: L^-T L^-1);
    NaN where eager raises (a zero pivot)."""
    if not _ok(f) or f.shape[-1] != f.shape[-2]:
        return NotImplemented
    n = f.shape[-1]
    L = _lower_factor(f, upper)
    eye = aten.expand.default(aten.eye.default(n, dtype=f.dtype, device=f.device),
                              list(f.shape))
    linv = solve_triangular(L, eye, lower=True)
    out = aten.matmul.default(aten.transpose.int(linv, -2, -1), linv)
    zero_pivot = aten.any.dim(aten.eq.Scalar(aten.diagonal.default(f, 0, -2, -1), 0), -1)
    bad = aten.unsqueeze.default(aten.unsqueeze.default(zero_pivot, -1), -1)
    return fortran(aten.where.self(bad, _full((), math.nan, f), out))


