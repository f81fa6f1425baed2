"""``linalg_matrix_exp`` for capture: ATen's ``mexp`` (its degree
polynomials are in ``linalg_lu.py``), with the scaling and
squaring counted without per-step Scalars.

An earlier version compared the norm with 62 powers of two as Python floats;
each Scalar other than 0 and 1 becomes a graph input, and the fused
dispatch that reads them all binds more than 32 buffers, which IREE cannot
load (the whole graph then ran eagerly). Here the powers of two are one
constant tensor: the number of squarings ``s`` (how many powers 2^j, j <
62, lie below ``norm / theta18``: ``max(0, ceil(log2(...)))`` without a
rounded log) is a comparison summed over it, ``2^s`` is read from it, and
squaring ``j`` applies where ``s > j`` (one boolean tensor, sliced). The
degree thresholds are compared against one constant tensor for the same
reason. Values are as ATen's (float32
only, NaN for a non-finite norm or more than 62 squarings).

Not registered (no ``register_decomposition``: capture never uses it): it
now compiles and loads (a 5x5 matrix: no fallback, 1e-6 from eager), but on OpInfo's batch of 5x5 matrices with
1-norms near 27 (four squarings) eager's own float32 result is 2.4e-3
(relative) off the float64 answer and this one 5.7e-4, so they differ by
1.8e-3, over the sweep's 1.3e-4 float32 tolerance: the sweep would report
a mismatch where the op now falls back. Registering it is a decision about
that tolerance, not a missing piece.
"""
from __future__ import annotations

import torch

from .linalg_lu import MAX_N, _MAX_SQUARINGS, _THETAS, _f32, _t1, _t2, _t4, _t8, _t12, _t18

aten = torch.ops.aten


def _t18_scale_square(a, norm):
    dev, dt = a.device, a.dtype
    pw = torch.tensor([2.0 ** j for j in range(_MAX_SQUARINGS + 1)], dtype=dt, device=dev)
    theta = torch.tensor(_f32(_THETAS[5]), dtype=dt, device=dev)
    x = aten.div.Tensor(norm, theta)
    x_ = aten.unsqueeze.default(aten.unsqueeze.default(x, -1), -1)           # (..., 1, 1)
    above = aten.gt.Tensor(aten.unsqueeze.default(x_, -1),
                           aten.slice.Tensor(pw, 0, 0, _MAX_SQUARINGS))      # (..., 1, 1, 62)
    s = aten.sum.dim_IntList(aten._to_copy.default(above, dtype=torch.int64), [-1])
    scale = aten.index.Tensor(pw, [s])                                       # 2^s, exact
    out = _t18(aten.div.Tensor(a, scale))
    for j in range(_MAX_SQUARINGS):
        due = aten.select.int(above, -1, j)  # x > 2^j, i.e. s > j
        out = aten.where.self(due, aten.matmul.default(out, out), out)
    too_big = aten.gt.Tensor(x_, aten.select.int(pw, 0, _MAX_SQUARINGS))
    return aten.where.self(too_big, torch.full((), float("nan"), dtype=dt, device=dev), out)


def linalg_matrix_exp(a):
    """``linalg_matrix_exp`` (float32): one matrix takes the degree its
    1-norm selects; a batch of more than one always takes T18 with scaling
    and squaring, as ATen does. A NaN or infinite norm gives NaN."""
    if a.dtype != torch.float32 or a.dim() < 2 or a.shape[-1] != a.shape[-2]:
        return NotImplemented
    n = a.shape[-1]
    if n > MAX_N:
        return NotImplemented
    if n == 0 or a.numel() == 0:
        return aten.clone.default(a)
    if n == 1:
        return aten.exp.default(a)
    dev, dt = a.device, a.dtype
    norm = aten.amax.default(aten.sum.dim_IntList(aten.abs.default(a), [-2]), [-1])
    out = _t18_scale_square(a, norm)
    if a.numel() == n * n:  # one matrix: the degree by norm, ATen's intervals
        norm_ = aten.unsqueeze.default(aten.unsqueeze.default(norm, -1), -1)
        thetas = torch.tensor([-1.0] + [_f32(t) for t in _THETAS[:5]], dtype=dt, device=dev)
        large = aten.ge.Tensor(norm_, aten.select.int(thetas, 0, 5))
        picked = out
        for k, t in enumerate((_t1, _t2, _t4, _t8, _t12)):
            inside = aten.logical_and.default(
                aten.gt.Tensor(norm_, aten.select.int(thetas, 0, k)),
                aten.le.Tensor(norm_, aten.select.int(thetas, 0, k + 1)))
            picked = aten.where.self(aten.logical_and.default(
                inside, aten.logical_not.default(large)), t(a), picked)
        out = picked
    bad = aten.logical_not.default(aten.isfinite.default(norm))
    bad = aten.unsqueeze.default(aten.unsqueeze.default(bad, -1), -1)
    return aten.where.self(bad, torch.full((), float("nan"), dtype=dt, device=dev), out)
