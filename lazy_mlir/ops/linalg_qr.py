"""Householder QR in LAPACK's conventions, unrolled over the (static, small)
matrix size in aten ops the torch dialect has: torch-mlir has no LAPACK ops
and no lowering of ``linalg_qr`` (it is denied in ``support.py``; a denied op
with a capture decomposition is decomposed, see ``lazy/decompose.py``), so
without these ``geqrf``, ``linalg.householder_product`` (``orgqr``),
``ormqr`` and ``linalg.qr`` / ``qr`` run eagerly.

Guarantees (float32/float64, any batch shape, wide or tall, matrix dims up
to ``MAX_DIM``; anything else returns ``NotImplemented`` and falls back):

- ``geqrf`` is LAPACK's ``geqr2``: reflector i comes from ``larfg`` on
  column i below the diagonal (alpha its diagonal entry): when the part
  below is exactly zero, tau = 0 and the column is left as it is (so a
  triangular input, a zero column or the last row of a square matrix give
  tau = 0, a negative diagonal kept); otherwise beta = -sign(alpha) *
  hypot(alpha, norm) (alpha = -0.0 counts as positive, as eager's MKL does),
  tau = (beta - alpha) / beta, v = x / (alpha - beta) stored below the
  diagonal with v[0] = 1 implied, beta on the diagonal. The trailing
  columns are updated with H = I - tau v v^T.
- ``householder_product`` / ``ormqr`` apply those reflectors (read only
  below the diagonal of the first k columns) in LAPACK's order;
  ``linalg_qr`` is ``geqrf`` then ``orgqr`` with eager's shapes for
  ``reduced``, ``complete`` and ``r`` (an empty Q).
- Values equal eager up to rounding where the factorisation is well
  defined (full column rank). Where it is not, the reflectors are
  rounding noise in eager too and only exactly-zero columns agree exactly.
  Outputs have LAPACK's column-major strides.
"""
from __future__ import annotations

import torch

from .linalg_cholesky import MAX_DIM, fortran
from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten
_FLOATS = (torch.float32, torch.float64)


def _ok(*tensors) -> bool:
    return all(t.dtype in _FLOATS and max(t.shape[-2:], default=0) <= MAX_DIM for t in tensors)


def _scalar(value, like, dtype=None):
    return aten.full.default([], value, dtype=dtype or like.dtype, device=like.device)


def _unsq(x, *dims):
    for d in dims:
        x = aten.unsqueeze.default(x, d)
    return x


def _safe(x, bad):
    """``x`` with 1 where ``bad``: a denominator that is never zero."""
    return aten.where.self(bad, _scalar(1.0, x), x)


def _norm(x):
    """The 2-norm over the last dim without overflow or underflow (as
    ``nrm2``): the largest magnitude times the norm of the scaled vector."""
    big = aten.amax.default(aten.abs.default(x), [-1])
    zero = aten.eq.Scalar(big, 0)
    scaled = aten.div.Tensor(x, _unsq(_safe(big, zero), -1))
    ss = aten.sum.dim_IntList(aten.mul.Tensor(scaled, scaled), [-1])
    return aten.mul.Tensor(big, aten.sqrt.default(ss))


def _hypot(a, b):
    """sqrt(a^2 + b^2) without overflow (``lapy2``), a and b >= 0."""
    hi, lo = aten.maximum.default(a, b), aten.minimum.default(a, b)
    zero = aten.eq.Scalar(hi, 0)
    r = aten.div.Tensor(lo, _safe(hi, zero))
    out = aten.mul.Tensor(hi, aten.sqrt.default(aten.add.Scalar(aten.mul.Tensor(r, r), 1.0)))
    # NaN explicitly: compiled maximum/minimum may drop a NaN operand.
    nan = aten.logical_or.default(aten.isnan.default(a), aten.isnan.default(b))
    return aten.where.self(nan, aten.add.Tensor(a, b), out)


def _arange(n, like):
    return aten.arange.default(n, dtype=torch.int64, device=like.device)


def _reflector(a, i, r1):
    """v (..., m) of reflector i stored in column i of ``a``: 1 at row i,
    the column's entries below it, zeros above."""
    col = aten.select.int(a, -1, i)
    v = aten.where.self(aten.gt.Scalar(r1, i), col, _scalar(0.0, a))
    return aten.where.self(aten.eq.Scalar(r1, i), _scalar(1.0, a), v)


def householder_qr(a):
    """(a, tau) of LAPACK ``geqr2`` on ``a`` (..., m, n)."""
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    r1 = _arange(m, a)
    cols = aten.unsqueeze.default(_arange(n, a), 0)  # (1, n)
    taus = []
    for i in range(k):
        if m - i <= 1:  # larfg of a single entry: H = I
            taus.append(aten.zeros.default(list(a.shape[:-2]), dtype=a.dtype, device=a.device))
            continue
        x = aten.select.int(a, -1, i)  # (..., m)
        alpha = aten.select.int(x, -1, i)
        below = aten.where.self(aten.gt.Scalar(r1, i), x, _scalar(0.0, a))
        xnorm = _norm(below)
        zero = aten.eq.Scalar(xnorm, 0)  # nothing to eliminate: tau = 0, H = I
        h = _hypot(aten.abs.default(alpha), xnorm)
        beta = aten.where.self(aten.lt.Scalar(alpha, 0), h, aten.neg.default(h))
        tau = aten.div.Tensor(aten.sub.Tensor(beta, alpha), _safe(beta, zero))
        tau = aten.where.self(zero, _scalar(0.0, a), tau)
        scale = aten.reciprocal.default(_safe(aten.sub.Tensor(alpha, beta), zero))
        v = aten.mul.Tensor(below, _unsq(scale, -1))
        v = aten.where.self(aten.eq.Scalar(r1, i), _scalar(1.0, a), v)  # (..., m)
        # Trailing columns: A - tau v (v^T A), also when tau = 0: eager's MKL
        # does not skip it (an infinite entry below makes the column NaN).
        w = aten.squeeze.dim(aten.matmul.default(_unsq(v, -2), a), -2)  # (..., n)
        upd = aten.sub.Tensor(a, aten.mul.Tensor(_unsq(tau, -1, -1),
                                                 aten.mul.Tensor(_unsq(v, -1), _unsq(w, -2))))
        a_new = aten.where.self(aten.gt.Scalar(cols, i), upd, a)
        # Column i: rows above unchanged, beta on the diagonal, v below.
        newcol = aten.where.self(aten.gt.Scalar(r1, i), v, x)
        newcol = aten.where.self(aten.eq.Scalar(r1, i), _unsq(beta, -1), newcol)
        newcol = aten.where.self(_unsq(zero, -1), x, newcol)
        a = aten.where.self(aten.eq.Scalar(cols, i), _unsq(newcol, -1), a_new)
        taus.append(tau)
    if taus:
        tau = aten.stack.default(taus, -1)
    else:
        tau = aten.zeros.default(list(a.shape[:-2]) + [0], dtype=a.dtype, device=a.device)
    return a, tau


def _apply_left(refl, tau, c, order):
    """H_i C = C - tau_i v_i (v_i^T C) for i in ``order``."""
    r1 = _arange(refl.shape[-2], refl)
    for i in order:
        v = _reflector(refl, i, r1)
        w = aten.matmul.default(_unsq(v, -2), c)  # (..., 1, p)
        t = _unsq(aten.select.int(tau, -1, i), -1, -1)
        c = aten.sub.Tensor(c, aten.mul.Tensor(t, aten.mul.Tensor(_unsq(v, -1), w)))
    return c


def _apply_right(refl, tau, c, order):
    """C H_i = C - tau_i (C v_i) v_i^T for i in ``order``."""
    r1 = _arange(refl.shape[-2], refl)
    for i in order:
        v = _reflector(refl, i, r1)
        w = aten.matmul.default(c, _unsq(v, -1))  # (..., p, 1)
        t = _unsq(aten.select.int(tau, -1, i), -1, -1)
        c = aten.sub.Tensor(c, aten.mul.Tensor(t, aten.mul.Tensor(w, _unsq(v, -2))))
    return c


def _eye(m, n, like, batch):
    eye = aten.eye.m(m, n, dtype=like.dtype, device=like.device)
    return aten.expand.default(eye, list(batch) + [m, n])


@register_decomposition(aten.geqrf.default, scope=CAPTURE)
def geqrf(a):
    """``torch.geqrf``."""
    if not _ok(a) or a.dim() < 2:
        return NotImplemented
    out, tau = householder_qr(a)
    return fortran(out), tau


@register_decomposition(aten.linalg_householder_product.default, scope=CAPTURE)
def householder_product(a, tau):
    """``torch.linalg.householder_product`` (``orgqr``): the first n columns
    of H_0 ... H_{k-1}, accumulated backwards from the identity as ``org2r``."""
    if not _ok(a) or a.dim() < 2 or tau.dtype != a.dtype or tau.dim() != a.dim() - 1:
        return NotImplemented
    m, n, k = a.shape[-2], a.shape[-1], tau.shape[-1]
    if not (m >= n >= k) or tuple(tau.shape[:-1]) != tuple(a.shape[:-2]):
        return NotImplemented  # eager raises
    q = _eye(m, n, a, a.shape[:-2])
    return fortran(_apply_left(a, tau, q, range(k - 1, -1, -1)))


@register_decomposition(aten.ormqr.default, scope=CAPTURE)
def ormqr(a, tau, c, left=True, transpose=False):
    """``torch.ormqr``: Q C, Q^T C, C Q or C Q^T for Q = H_0 ... H_{k-1}."""
    if not _ok(a, c) or a.dim() < 2 or c.dim() != a.dim() or tau.dim() != a.dim() - 1 \
            or not (a.dtype == tau.dtype == c.dtype):
        return NotImplemented
    mq = c.shape[-2] if left else c.shape[-1]
    k = tau.shape[-1]
    # Eager's kernel also wants k = min(mq, input columns) (its meta function does not).
    if a.shape[-2] != mq or k != min(mq, a.shape[-1]) \
            or not (tuple(a.shape[:-2]) == tuple(c.shape[:-2]) == tuple(tau.shape[:-1])):
        return NotImplemented  # eager raises (or broadcasts, which we leave to it)
    forward, backward = range(k), range(k - 1, -1, -1)
    if left:
        out = _apply_left(a, tau, c, forward if transpose else backward)
    else:
        out = _apply_right(a, tau, c, backward if transpose else forward)
    return fortran(out)


@register_decomposition(aten.linalg_qr.default, scope=CAPTURE)
def linalg_qr(a, mode="reduced"):
    """``torch.linalg.qr``: ``geqrf`` then ``orgqr``."""
    if not _ok(a) or a.dim() < 2 or mode not in ("reduced", "complete", "r"):
        return NotImplemented
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    refl, tau = householder_qr(a)
    rows = aten.slice.Tensor(refl, -2, 0, m if mode == "complete" else k)
    r = fortran(aten.triu.default(rows))
    if mode == "r":
        return aten.zeros.default([0], dtype=a.dtype, device=a.device), r
    qcols = m if mode == "complete" else k
    q = _apply_left(refl, tau, _eye(m, qcols, a, a.shape[:-2]), range(k - 1, -1, -1))
    return fortran(q), r


