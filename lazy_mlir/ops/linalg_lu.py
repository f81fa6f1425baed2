"""The LU family of ``torch.linalg`` (``linalg_lu_factor_ex``, ``linalg_lu``,
``lu_unpack``, ``linalg_lu_solve``, ``_linalg_solve_ex``, ``linalg_inv_ex``)
and the triangular solves (``linalg_solve_triangular``, ``triangular_solve``)
in aten ops the torch dialect has, registered for capture time.

torch-mlir has no LAPACK ops, but shapes are static at capture: the
classical algorithms are unrolled over the (small) matrix size, vectorized
over the batch dimensions and the right-hand sides. No value is read at
capture: pivot choices are ``argmax``/``gather``/``where`` on the device.

Guarantees (float32/float64, real only; anything else is NotImplemented):
- LU with partial pivoting as LAPACK's ``getrf``: the pivot of column k is
  the first row of largest ``|a|`` at or below the diagonal, the same row
  swaps, the column scaled by the reciprocal of the pivot (``getrf2``; by a
  division when the pivot is below ``sfmin``), 1-based int32 pivots and
  ``info`` = the first zero pivot (1-based, 0 if none). A zero pivot column
  is left unscaled, as LAPACK does, so singular matrices give LAPACK's
  finite factors. Values agree with eager up to rounding (LAPACK updates in
  blocks, in another order; the compiled code may fuse multiply-adds), so a
  matrix singular only up to rounding (``outer(randn, randn)``) may get a
  tiny pivot where eager got an exact zero, and another ``info``; exact
  singularity (zero columns, equal rows, exactly cancelling elimination)
  gives eager's ``info``.
- Triangular solves by substitution; a zero diagonal gives inf/NaN as the
  BLAS ``trsm`` does (``b / 0``).
- ``_linalg_solve_ex``/``linalg_inv_ex`` return the ``LU``/``pivots`` of
  ``A`` as eager CPU does (checked: whatever ``A``'s layout).
- Matrices larger than ``MAX_N`` (64) are NotImplemented: the unrolled
  graph grows as n (factor) and n (each solve).
"""
from __future__ import annotations

import struct

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten

MAX_N = 64


def _ok(*tensors) -> bool:
    """Real floating inputs we unroll (complex and integer inputs fall back)."""
    return all(t.dtype in (torch.float32, torch.float64) for t in tensors)


def _sfmin(dtype) -> float:
    """LAPACK's ``lamch('S')``: the smallest number whose reciprocal does not
    overflow (the smallest normal number for IEEE floats)."""
    return torch.finfo(dtype).tiny


def _swap_rows(w, p):
    """``w`` (..., r, c) with rows 0 and ``p`` (..., int64, per batch) swapped."""
    r, c = w.shape[-2], w.shape[-1]
    idx = aten.expand.default(aten.unsqueeze.default(aten.unsqueeze.default(p, -1), -1),
                              list(p.shape) + [1, c])
    row_p = aten.gather.default(w, -2, idx)
    row_0 = aten.slice.Tensor(w, -2, 0, 1)
    rows = aten.unsqueeze.default(torch.arange(r, device=w.device), -1)  # (r, 1)
    is_p = aten.eq.Tensor(rows, aten.unsqueeze.default(aten.unsqueeze.default(p, -1), -1))
    out = aten.where.self(is_p, row_0, w)
    return aten.where.self(aten.eq.Scalar(rows, 0), row_p, out)


def lu_factor_unrolled(a):
    """``(LU, pivots, info)`` of ``a`` (..., m, n) as LAPACK's ``getrf``
    (see the module docstring); ``a`` must be non-empty."""
    m, n = a.shape[-2], a.shape[-1]
    k_steps = min(m, n)
    done = []  # the finished rows of LU, one (..., 1, n) each
    pivots = []  # 1-based int64 (...,) per step
    zero_steps = []  # bool (...,) per step: the pivot is zero
    sfmin = _sfmin(a.dtype)
    w = a
    for k in range(k_steps):
        col = aten.select.int(w, -1, k)  # (..., m - k)
        p = aten.argmax.default(aten.abs.default(col), -1)  # first index of max |a|
        pivots.append(aten.add.Scalar(p, k + 1))
        w = _swap_rows(w, p)
        top = aten.slice.Tensor(w, -2, 0, 1)  # (..., 1, n): the pivot row
        done.append(top)
        piv = aten.select.int(aten.select.int(top, -2, 0), -1, k)  # (...,)
        is_zero = aten.eq.Scalar(piv, 0)
        zero_steps.append(is_zero)
        rest = aten.slice.Tensor(w, -2, 1, m - k)  # (..., m - k - 1, n)
        if m - k - 1 == 0:
            w = rest
            continue
        piv_ = aten.unsqueeze.default(piv, -1)
        col_rest = aten.select.int(rest, -1, k)  # (..., m - k - 1)
        # getrf2: scale by the reciprocal when it does not overflow, else
        # divide; a zero pivot leaves the (all-zero) column as it is.
        scaled = aten.where.self(aten.ge.Scalar(aten.abs.default(piv_), sfmin),
                                 aten.mul.Tensor(col_rest, aten.reciprocal.default(piv_)),
                                 aten.div.Tensor(col_rest, piv_))
        l_col = aten.where.self(aten.unsqueeze.default(is_zero, -1), col_rest, scaled)
        l_col = aten.unsqueeze.default(l_col, -1)  # (..., r, 1)
        parts = [aten.slice.Tensor(rest, -1, 0, k), l_col]
        if k + 1 < n:
            u_row = aten.slice.Tensor(top, -1, k + 1, n)  # (..., 1, n - k - 1)
            trailing = aten.slice.Tensor(rest, -1, k + 1, n)
            parts.append(aten.sub.Tensor(trailing, aten.mul.Tensor(l_col, u_row)))
        w = aten.cat.default(parts, -1)
    lu = aten.cat.default(done + ([w] if w.shape[-2] else []), -2)
    piv_t = aten._to_copy.default(aten.stack.default(pivots, -1), dtype=torch.int32)
    # info: the first k + 1 whose pivot is zero, else 0.
    steps = torch.arange(1, k_steps + 1, dtype=torch.int32, device=a.device)
    none = torch.full((), k_steps + 1, dtype=torch.int32, device=a.device)
    first = aten.amin.default(aten.where.self(aten.stack.default(zero_steps, -1), steps, none), [-1])
    info = aten.where.self(aten.eq.Scalar(first, k_steps + 1),
                           torch.zeros((), dtype=torch.int32, device=a.device), first)
    return lu, piv_t, info


def _empty_lu(a):
    k = min(a.shape[-2], a.shape[-1])
    pivots = torch.zeros(list(a.shape[:-2]) + [k], dtype=torch.int32, device=a.device)
    info = torch.zeros(list(a.shape[:-2]), dtype=torch.int32, device=a.device)
    return aten.clone.default(a), pivots, info


@register_decomposition(aten.linalg_lu_factor_ex.default, scope=CAPTURE)
def linalg_lu_factor_ex(a, pivot=True, check_errors=False):
    """``linalg_lu_factor_ex``; ``pivot=False`` (an error on CPU) and
    ``check_errors`` (raises from values) fall back."""
    if not pivot or check_errors or not _ok(a) or a.dim() < 2:
        return NotImplemented
    if max(a.shape[-2], a.shape[-1]) > MAX_N:
        return NotImplemented
    if a.numel() == 0:
        return _empty_lu(a)
    return lu_factor_unrolled(a)


def _perm_from_pivots(pivots, m):
    """The row order after LAPACK's swaps: ``perm[i]`` is the original row
    at row i (``P^T A = A[perm]``); pivots (..., k) 1-based int."""
    k = pivots.shape[-1]
    batch = list(pivots.shape[:-1])
    rows = torch.arange(m, device=pivots.device)
    perm = aten.expand.default(rows, batch + [m])
    piv = aten.sub.Scalar(aten._to_copy.default(pivots, dtype=torch.int64), 1)
    for i in range(k):
        p = aten.slice.Tensor(piv, -1, i, i + 1)  # (..., 1)
        at_p = aten.gather.default(perm, -1, p)
        at_i = aten.slice.Tensor(perm, -1, i, i + 1)
        perm = aten.where.self(aten.eq.Tensor(rows, p), at_i, perm)
        perm = aten.where.self(aten.eq.Scalar(rows, i), at_p, perm)
    return perm


def _inverse_perm(perm):
    """``q`` with ``q[perm[i]] = i``."""
    m = perm.shape[-1]
    rows = torch.arange(m, device=perm.device)
    onehot = aten.eq.Tensor(aten.unsqueeze.default(perm, -2), aten.unsqueeze.default(rows, -1))
    # onehot[j, i] = perm[i] == j: the i of row j is its argmax.
    return aten.argmax.default(aten._to_copy.default(onehot, dtype=torch.int32), -1)


def _take_rows(b, perm):
    """``b[..., perm, :]`` per batch."""
    idx = aten.expand.default(aten.unsqueeze.default(perm, -1), list(b.shape))
    return aten.gather.default(b, -2, idx)


@register_decomposition(aten.lu_unpack.default, scope=CAPTURE)
def lu_unpack(lu, pivots, unpack_data=True, unpack_pivots=True):
    """``lu_unpack`` as ATen: ``L = tril(LU, -1) + I`` (m x k), ``U =
    triu(LU)`` (k x n), ``P`` from the pivots' swaps (``A = P L U``);
    parts not asked for are empty tensors."""
    if not _ok(lu) or lu.dim() < 2 or pivots.dtype not in (torch.int32, torch.int64):
        return NotImplemented
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    if max(m, n) > MAX_N or pivots.shape[-1] != k:
        return NotImplemented
    batch = list(lu.shape[:-2])
    if unpack_data:
        eye = torch.eye(m, k, dtype=lu.dtype, device=lu.device)
        low = aten.tril.default(aten.slice.Tensor(lu, -1, 0, k), -1)
        L = aten.add.Tensor(low, eye)
        U = aten.triu.default(aten.slice.Tensor(lu, -2, 0, k), 0)
    else:
        L = torch.empty([0], dtype=lu.dtype, device=lu.device)
        U = torch.empty([0], dtype=lu.dtype, device=lu.device)
    if unpack_pivots:
        if list(pivots.shape[:-1]) != batch:
            return NotImplemented
        if m == 0 or lu.numel() == 0:
            P = aten.expand.default(torch.eye(m, dtype=lu.dtype, device=lu.device), batch + [m, m])
            P = aten.clone.default(P)
        else:
            perm = _perm_from_pivots(pivots, m)
            rows = aten.unsqueeze.default(torch.arange(m, device=lu.device), -1)
            P = aten._to_copy.default(aten.eq.Tensor(aten.unsqueeze.default(perm, -2), rows),
                                      dtype=lu.dtype)
    else:
        P = torch.empty([0], dtype=lu.dtype, device=lu.device)
    return P, L, U


@register_decomposition(aten.linalg_lu.default, scope=CAPTURE)
def linalg_lu(a, pivot=True):
    """``linalg_lu``: ``lu_factor_ex`` then ``lu_unpack``, as ATen."""
    if not pivot:
        return NotImplemented
    if not _ok(a) or a.dim() < 2 or max(a.shape[-2], a.shape[-1]) > MAX_N:
        return NotImplemented
    lu, piv, _ = _empty_lu(a) if a.numel() == 0 else lu_factor_unrolled(a)
    return lu_unpack(lu, piv)


def _substitute(a, b, upper, unit):
    """Solve ``tri(a) X = b`` (a (..., n, n), b (..., n, k), same batch) by
    substitution, column by column as the reference ``trsm``: x_i = b_i /
    a_ii, then the rows still to solve lose ``a[:, i] x_i``."""
    n = a.shape[-1]
    order = range(n - 1, -1, -1) if upper else range(n)
    xs = {}
    rem = b  # the rows not solved yet, in solving order
    if upper:  # solve from the bottom: keep rem as rows [0, i]
        for i in order:
            x = aten.slice.Tensor(rem, -2, i, i + 1)  # (..., 1, k)
            if not unit:
                x = aten.div.Tensor(x, aten.slice.Tensor(aten.slice.Tensor(a, -2, i, i + 1),
                                                         -1, i, i + 1))
            xs[i] = x
            if i:
                coef = aten.slice.Tensor(aten.slice.Tensor(a, -2, 0, i), -1, i, i + 1)
                rem = aten.sub.Tensor(aten.slice.Tensor(rem, -2, 0, i), aten.mul.Tensor(coef, x))
    else:  # keep rem as rows [i, n)
        for i in order:
            x = aten.slice.Tensor(rem, -2, 0, 1)
            if not unit:
                x = aten.div.Tensor(x, aten.slice.Tensor(aten.slice.Tensor(a, -2, i, i + 1),
                                                         -1, i, i + 1))
            xs[i] = x
            if i + 1 < n:
                coef = aten.slice.Tensor(aten.slice.Tensor(a, -2, i + 1, n), -1, i, i + 1)
                rem = aten.sub.Tensor(aten.slice.Tensor(rem, -2, 1, n - i),
                                      aten.mul.Tensor(coef, x))
    return aten.cat.default([xs[i] for i in range(n)], -2)


def _broadcast_batch(a, b):
    """``a`` (..., r, c) and ``b`` (..., s, t) expanded to one batch shape."""
    batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return (aten.expand.default(a, batch + list(a.shape[-2:])),
            aten.expand.default(b, batch + list(b.shape[-2:])))


def solve_triangular_unrolled(a, b, *, upper, left=True, unitriangular=False):
    """``linalg.solve_triangular(a, b, upper=, left=, unitriangular=)`` by
    substitution (only the ``upper``/lower triangle of ``a`` is read; batch
    dims broadcast). For others needing a triangular solve: the caller
    checks dtype, size (``MAX_N``) and non-emptiness first."""
    a, b = _broadcast_batch(a, b)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        x = _substitute(aten.transpose.int(a, -2, -1), aten.transpose.int(b, -2, -1),
                        not upper, unitriangular)
        return aten.transpose.int(x, -2, -1)
    return _substitute(a, b, upper, unitriangular)


def _solve_shape(a, b):
    """The batch-broadcast shape of the solution (that of ``b``'s matrices)."""
    batch = list(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return batch + list(b.shape[-2:])


def _numel(shape) -> int:
    out = 1
    for s in shape:
        out *= s
    return out


@register_decomposition(aten.linalg_solve_triangular.default, scope=CAPTURE)
def linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    """``linalg_solve_triangular``."""
    if not _ok(a, b) or a.dtype != b.dtype or a.dim() < 2 or b.dim() < 2:
        return NotImplemented
    n = a.shape[-1]
    if n > MAX_N or a.shape[-2] != n:
        return NotImplemented
    shape = _solve_shape(a, b)
    if _numel(shape) == 0:
        return torch.zeros(shape, dtype=b.dtype, device=b.device)
    return solve_triangular_unrolled(a, b, upper=upper, left=left, unitriangular=unitriangular)


@register_decomposition(aten.triangular_solve.default, scope=CAPTURE)
def triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    """``triangular_solve``: ``(X, A)`` with ``op(A) X = b``, ``A``'s copy
    broadcast to the batch shape."""
    if not _ok(a, b) or a.dtype != b.dtype or a.dim() < 2 or b.dim() < 2:
        return NotImplemented
    n = a.shape[-1]
    if n > MAX_N or a.shape[-2] != n:
        return NotImplemented
    a_b, b_b = _broadcast_batch(a, b)
    clone = aten.clone.default(a_b)
    if b_b.numel() == 0:
        return aten.clone.default(b_b), clone
    if transpose:
        x = _substitute(aten.transpose.int(a_b, -2, -1), b_b, not upper, unitriangular)
    else:
        x = _substitute(a_b, b_b, upper, unitriangular)
    return x, clone


def lu_solve_unrolled(lu, pivots, b, left=True, adjoint=False):
    """``linalg_lu_solve`` on non-empty inputs: LAPACK's ``getrs`` (row
    swaps, unit-lower then upper substitution, or the transposed steps)."""
    if not left:  # X A = B  <=>  A^H X^H = B^H
        x = lu_solve_unrolled(lu, pivots, aten.transpose.int(b, -2, -1), True, not adjoint)
        return aten.transpose.int(x, -2, -1)
    n = lu.shape[-1]
    batch = list(torch.broadcast_shapes(lu.shape[:-2], b.shape[:-2], pivots.shape[:-1]))
    lu = aten.expand.default(lu, batch + [n, n])
    pivots = aten.expand.default(pivots, batch + [n])
    b = aten.expand.default(b, batch + list(b.shape[-2:]))
    perm = _perm_from_pivots(pivots, n)
    if not adjoint:  # A = P L U:  X = U^-1 L^-1 P^T B
        y = _substitute(lu, _take_rows(b, perm), upper=False, unit=True)
        return _substitute(lu, y, upper=True, unit=False)
    lu_t = aten.transpose.int(lu, -2, -1)  # A^T = U^T L^T P^T:  X = P L^-T U^-T B
    y = _substitute(lu_t, b, upper=False, unit=False)
    z = _substitute(lu_t, y, upper=True, unit=True)
    return _take_rows(z, _inverse_perm(perm))


@register_decomposition(aten.linalg_lu_solve.default, scope=CAPTURE)
def linalg_lu_solve(lu, pivots, b, *, left=True, adjoint=False):
    """``linalg_lu_solve``."""
    if not _ok(lu, b) or lu.dtype != b.dtype or lu.dim() < 2 or b.dim() < 2:
        return NotImplemented
    n = lu.shape[-1]
    if n > MAX_N or lu.shape[-2] != n or pivots.dtype != torch.int32:
        return NotImplemented
    batch = list(torch.broadcast_shapes(lu.shape[:-2], b.shape[:-2], pivots.shape[:-1]))
    out_shape = batch + list(b.shape[-2:])
    if _numel(out_shape) == 0:  # n == 0 empties b too
        return torch.zeros(out_shape, dtype=b.dtype, device=b.device)
    return lu_solve_unrolled(lu, pivots, b, left, adjoint)


@register_decomposition(aten._linalg_solve_ex.default, scope=CAPTURE)
def _linalg_solve_ex(a, b, *, left=True, check_errors=False):
    """``_linalg_solve_ex`` as ATen on the CPU: ``lu_factor_ex(A)`` (its
    ``LU`` and ``pivots`` are returned, those of ``A`` whatever its layout),
    then ``lu_solve`` (vector right-hand sides as columns)."""
    if check_errors or not _ok(a, b) or a.dtype != b.dtype or a.dim() < 2 or b.dim() < 1:
        return NotImplemented
    n = a.shape[-1]
    if n > MAX_N or a.shape[-2] != n:
        return NotImplemented
    vector = b.dim() == 1 or (b.dim() == a.dim() - 1 and list(b.shape) == list(a.shape[:-1]))
    if vector and not left:  # an error in eager
        return NotImplemented
    lu, piv, info = _empty_lu(a) if a.numel() == 0 else lu_factor_unrolled(a)
    b_ = aten.unsqueeze.default(b, -1) if vector else b
    x = linalg_lu_solve(lu, piv, b_, left=left)
    if x is NotImplemented:
        return NotImplemented
    if vector:
        x = aten.squeeze.dim(x, -1)
    return x, lu, piv, info


@register_decomposition(aten.linalg_inv_ex.default, scope=CAPTURE)
def linalg_inv_ex(a, *, check_errors=False):
    """``linalg_inv_ex`` as ATen: ``linalg_solve_ex(A, I)``."""
    if check_errors or not _ok(a) or a.dim() < 2:
        return NotImplemented
    n = a.shape[-1]
    eye = aten.clone.default(aten.expand.default(torch.eye(n, dtype=a.dtype, device=a.device),
                                                 list(a.shape)))
    out = _linalg_solve_ex(a, eye)
    if out is NotImplemented:
        return NotImplemented
    x, _, _, info = out
    return x, info


# linalg_matrix_exp: ATen's ``mexp`` (Bader, Blanes, Casas 2019), float32.
# Degrees 1, 2, 4, 8, 12 and 18 with their norm bounds (``thetas_float``).
_THETAS = (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02,
           5.800524627688768e-01, 1.461661507209034e+00, 3.010066362817634e+00)
_SQRT_177 = 0.1330413469565007072504e+2
_T12_B = ((9.0198e-16, 0.46932117595418237389, -0.20099424927047284052,
           -0.04623946134063071740),
          (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031,
           0.01108844528519167989),
          (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968,
           0.00610700528898058230),
          (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079,
           -0.00675951846863086359))
_T18_B = ((0., -1.00365581030144618291e-01, -8.02924648241156932449e-03,
           -8.92138498045729985177e-04, 0.),
          (0., 3.97849749499645077844e-01, 1.36783778460411720168e+00,
           4.98289622525382669416e-01, -6.37898194594723280150e-04),
          (-1.09676396052962061844e+01, 1.68015813878906206114e+00,
           5.71779846478865511061e-02, -6.98210122488052056106e-03,
           3.34975017086070470649e-05),
          (-9.04316832390810593223e-02, -6.76404519071381882256e-02,
           6.75961301770459654925e-02, 2.95552570429315521194e-02,
           -1.39180257516060693404e-05),
          (0., 0., -9.23364619367118555360e-02, -1.69364939002081722752e-02,
           -1.40086798182036094347e-05))
# ATen squares s times with 2**s computed in int64: above 2**62 it overflows
# (garbage in eager); we give NaN there rather than pretend to match.
_MAX_SQUARINGS = 62


def _powers(a, count):
    """ATen's ``_fill_matrix_powers``: the first ``count`` of I, A, A^2, A^3, A^6."""
    n = a.shape[-1]
    eye = aten.expand.default(torch.eye(n, dtype=a.dtype, device=a.device), list(a.shape))
    out = [eye, a]
    if count > 2:
        out.append(aten.matmul.default(a, a))
    if count > 3:
        out.append(aten.matmul.default(a, out[2]))
    if count > 4:
        out.append(aten.matmul.default(out[3], out[3]))
    return out[:count]


def _lincomb(mats, coefs):
    """``_compute_linear_combination``: sum_j coefs[j] * mats[j], in order."""
    # mul.Scalar: a Python float given to mul.Tensor would be a lifted 0-d
    # constant, one graph input each (a dispatch binds at most 32 buffers).
    out = aten.mul.Scalar(mats[0], float(coefs[0]))
    for m, c in zip(mats[1:], coefs[1:]):
        out = aten.add.Tensor(out, aten.mul.Scalar(m, float(c)))
    return out


def _f32(x: float) -> float:
    """A constant rounded to float32 as ATen's ``constexpr scalar_t``."""
    # struct, not torch.tensor: a tensor made while tracing is a graph constant.
    return struct.unpack("f", struct.pack("f", x))[0]


def _t1(a):
    i, a1 = _powers(a, 2)
    return aten.add.Tensor(i, a1)


def _t2(a):
    i, a1, a2 = _powers(a, 3)
    return aten.add.Tensor(aten.add.Tensor(i, a1), aten.div.Scalar(a2, 2.0))


def _t4(a):
    ms = _powers(a, 3)
    c = [_f32(1 / 2.0), _f32(1 / 6.0), _f32(1 / 24.0)]
    a4 = aten.matmul.default(ms[2], _lincomb(ms, c))
    return _lincomb(ms + [a4], [1.0, 1.0, 0.0, 1.0])


def _t8(a):
    s = _SQRT_177
    x3 = 2. / 3.
    x1, x2 = x3 * ((1. + s) / 88.), x3 * ((1. + s) / 352.)
    x4 = (-271. + 29. * s) / (315. * x3)
    x5 = (-11. + 11. * s) / (1260. * x3)
    x6 = (-99. + 11. * s) / (5040. * x3)
    x7 = (89. - s) / (5040. * x3)
    y2 = (857. - 58. * s) / 630.
    x1, x2, x3, x4, x5, x6, x7, y2 = map(_f32, (x1, x2, x3, x4, x5, x6, x7, y2))
    ms = _powers(a, 3)
    a4 = aten.matmul.default(ms[2], _lincomb(ms[1:3], [x1, x2]))
    ms = ms + [a4]
    a8 = aten.matmul.default(_lincomb(ms[2:4], [x3, 1.0]), _lincomb(ms[0:4], [x4, x5, x6, x7]))
    return _lincomb(ms + [a8], [1.0, 1.0, y2, 0.0, 1.0])


def _t12(a):
    ms = _powers(a, 4)
    b = [_lincomb(ms, [_f32(c) for c in row]) for row in _T12_B]
    b2 = aten.add.Tensor(b[2], aten.matmul.default(b[3], b[3]))
    return aten.add.Tensor(b[0], aten.matmul.default(aten.add.Tensor(b[1], b2), b2))


def _t18(a):
    ms = _powers(a, 5)
    b = [_lincomb(ms, [_f32(c) for c in row]) for row in _T18_B]
    b3 = aten.add.Tensor(b[3], aten.matmul.default(b[0], b[4]))
    return aten.add.Tensor(b[1], aten.matmul.default(aten.add.Tensor(b[2], b3), b3))


