"""Fractional max pooling (``F.fractional_max_pool2d``/``3d``), applied at
capture (``lazy/decompose.py``), as ATen's CPU kernel computes it
(FractionalMaxPool2d.cpp, FractionalMaxPool3d.cpp).

Each plane's window starts come from its random sample ``u`` (drawn by the
caller, on the host like every random number here): with
``alpha = (in - pool) / (out - 1)``, start ``i`` is
``int((i + u) * alpha) - int(u * alpha)`` and the last window ends at the
border. The same float operations in the same order give the same starts.
The windows are gathered (static shape: out x pool per axis) and reduced as
ATen scans them: the first maximum wins a tie, and a NaN anywhere makes the
result NaN with the index of the last NaN.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _starts(samples, size, out, pool):
    """(N, C, out) int64 window starts along one axis from (N, C) samples."""
    if out == 1:
        return torch.full(samples.shape + (1,), size - pool, dtype=torch.int64,
                          device=samples.device)
    # ATen: static_cast<scalar_t>(in - pool) / static_cast<scalar_t>(out - 1), in scalar_t.
    alpha = torch.div(torch.full((), float(size - pool), dtype=samples.dtype,
                                 device=samples.device),
                      torch.full((), float(out - 1), dtype=samples.dtype, device=samples.device))
    i = torch.arange(out - 1, dtype=samples.dtype, device=samples.device)
    u = samples.unsqueeze(-1)
    starts = ((i + u) * alpha).to(torch.int32) - (u * alpha).to(torch.int32)
    last = torch.full(samples.shape + (1,), size - pool, dtype=torch.int32, device=samples.device)
    return torch.cat([starts, last], -1).to(torch.int64)


def _fractional_max_pool(x, kernel_size, output_size, samples, nd):
    if not x.is_floating_point() or x.dtype == torch.float64 or x.dim() not in (nd + 1, nd + 2):
        return NotImplemented
    batched = x.dim() == nd + 2
    if not batched:
        x = x.unsqueeze(0)
    n, c = x.shape[:2]
    sizes = list(x.shape[2:])
    if any(k > s for k, s in zip(kernel_size, sizes)):
        return NotImplemented  # eager raises its error
    out_shape = [n, c] + list(output_size)
    if 0 in out_shape:  # nothing to pool: empty results
        values = aten.new_zeros.default(x, out_shape)
        indices = aten.new_zeros.default(x, out_shape, dtype=torch.int64)
        return (values, indices) if batched else (values.squeeze(0), indices.squeeze(0))
    # ATen's sample order: (W, H) in 2-d, (T, H, W) in 3-d.
    order = [1, 0] if nd == 2 else [0, 1, 2]
    flat = torch.zeros((), dtype=torch.int64, device=x.device)
    for axis in range(nd):
        starts = _starts(samples[..., order[axis]], sizes[axis], output_size[axis],
                         kernel_size[axis])
        pos = starts.unsqueeze(-1) + torch.arange(kernel_size[axis], device=x.device)  # N,C,o,k
        stride = 1
        for s in sizes[axis + 1:]:
            stride *= s
        shape = [n, c] + [1] * nd + [1] * nd
        shape[2 + axis], shape[2 + nd + axis] = output_size[axis], kernel_size[axis]
        flat = flat + (pos * stride).reshape(shape)
    k = 1
    for s in kernel_size:
        k *= s
    index = flat.reshape(n, c, -1, k)                                    # N,C,prod(out),K
    vals = torch.gather(x.reshape(n, c, 1, -1).expand(n, c, index.shape[2], -1), 3, index)
    nan = torch.isnan(vals)
    any_nan = nan.any(-1, keepdim=True)
    last_nan = (k - 1) - torch.argmax(torch.flip(nan, [-1]).to(torch.int32), -1, keepdim=True)
    first_max = torch.argmax(torch.where(nan, float("-inf"), vals), -1, keepdim=True)
    pick = torch.where(any_nan, last_nan, first_max)
    values = torch.gather(vals, 3, pick).reshape(out_shape)
    indices = torch.gather(index, 3, pick).reshape(out_shape)
    if not batched:
        values, indices = values.squeeze(0), indices.squeeze(0)
    return values, indices


def fractional_max_pool2d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, list(kernel_size), list(output_size), random_samples, 2)


def fractional_max_pool3d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, list(kernel_size), list(output_size), random_samples, 3)


POOL_DECOMPOSITIONS = {
    aten.fractional_max_pool2d.default: fractional_max_pool2d,
    aten.fractional_max_pool3d.default: fractional_max_pool3d,
}
