"""Neural-network layers: ``fractional_max_pool2d``/``3d``,
``grid_sampler_3d`` and anti-aliased resampling at capture time;
``avg_pool2d_backward`` and inference ``native_batch_norm`` before import.

Fractional max pooling (``F.fractional_max_pool2d``/``3d``), applied at
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

import functools

import torch

from .registry import CAPTURE, IMPORT, register_decomposition

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


@register_decomposition(aten.fractional_max_pool2d.default, scope=CAPTURE)
def fractional_max_pool2d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, list(kernel_size), list(output_size), random_samples, 2)


@register_decomposition(aten.fractional_max_pool3d.default, scope=CAPTURE)
def fractional_max_pool3d(x, kernel_size, output_size, random_samples):
    return _fractional_max_pool(x, list(kernel_size), list(output_size), random_samples, 3)


# -- grid_sampler_3d -----------------------------------------------------------
# ``grid_sampler_3d`` (``F.grid_sample`` of a volume), applied at capture
# (``lazy/decompose.py``): PyTorch decomposes only the 2-d sampler. This is
# the same construction one dimension up, following ATen's CPU kernel
# (GridSampler.cpp): unnormalize the grid, pad by zeros, border or
# reflection, then a trilinear blend of the 8 neighbours (zero weight outside
# the volume) or the nearest voxel (round half to even, as ``nearbyint``).

def _unnormalize(coords, size, align_corners):
    if align_corners:
        return (coords + 1) / 2 * (size - 1)
    return ((coords + 1) * size - 1) / 2


def _reflect(coords, twice_low, twice_high):
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coords = (coords - low).abs()
    # fmod by a 0-d tensor: torch-mlir cannot lower fmod.Scalar of a float
    # constant (span 1.0 is kept as a constant, not a graph input).
    extra = torch.fmod(coords, torch.full((), span, dtype=coords.dtype, device=coords.device))
    flips = torch.floor(coords / span)
    even = torch.floor(flips / 2) * 2 == flips
    return torch.where(even, extra + low, span + low - extra)


def _clip(coords, size):
    """ATen's clip_coordinates, min(size - 1, max(x, 0)) with std::min and
    std::max: a NaN coordinate comes out as size - 1."""
    return torch.where(torch.isnan(coords), size - 1, torch.clamp(coords, 0, size - 1))


def _source_index(coords, size, padding_mode, align_corners):
    coords = _unnormalize(coords, size, align_corners)
    if padding_mode == 1:  # border
        return _clip(coords, size)
    if padding_mode == 2:  # reflection
        if align_corners:
            coords = _reflect(coords, 0, 2 * (size - 1))
        else:
            coords = _reflect(coords, -1, 2 * size - 1)
        return _clip(coords, size)
    return coords


@register_decomposition(aten.grid_sampler_3d.default, scope=CAPTURE)
def grid_sampler_3d(a, grid, interpolation_mode, padding_mode, align_corners):
    """Trilinear (0) or nearest (1) sampling of ``a`` (N, C, D, H, W) at
    ``grid`` (N, oD, oH, oW, 3) holding (x, y, z) in [-1, 1]."""
    if interpolation_mode not in (0, 1) or padding_mode not in (0, 1, 2):
        return NotImplemented
    if not a.is_floating_point() or a.dtype == torch.float64 or a.dim() != 5:
        return NotImplemented
    n, c, d, h, w = a.shape
    _, od, oh, ow, _ = grid.shape
    if 0 in (n, c, d, h, w, od, oh, ow):
        return NotImplemented
    ix = _source_index(grid[..., 0], w, padding_mode, align_corners)
    iy = _source_index(grid[..., 1], h, padding_mode, align_corners)
    iz = _source_index(grid[..., 2], d, padding_mode, align_corners)
    n_idx = torch.arange(n, device=a.device).view(n, 1, 1, 1, 1)
    c_idx = torch.arange(c, device=a.device).view(1, c, 1, 1, 1)

    def sample(x, y, z, weight):
        inside = (x >= 0) & (x < w) & (y >= 0) & (y < h) & (z >= 0) & (z < d)
        xi, yi, zi = (torch.where(inside, t, 0).to(torch.int64).unsqueeze(1) for t in (x, y, z))
        weight = torch.where(inside, weight, 0).unsqueeze(1)
        # A NaN coordinate is outside (its comparisons are false): weight 0, as ATen.
        return a[n_idx, c_idx, zi, yi, xi] * weight

    if interpolation_mode == 1:
        x, y, z = torch.round(ix), torch.round(iy), torch.round(iz)
        return sample(x, y, z, torch.ones_like(ix))
    x0, y0, z0 = torch.floor(ix), torch.floor(iy), torch.floor(iz)
    fx, fy, fz = ix - x0, iy - y0, iz - z0
    out = None
    for dz in (0, 1):
        wz = fz if dz else 1 - fz
        for dy in (0, 1):
            wy = fy if dy else 1 - fy
            for dx in (0, 1):
                wx = fx if dx else 1 - fx
                term = sample(x0 + dx, y0 + dy, z0 + dz, wx * wy * wz)
                out = term if out is None else out + term
    return out


# -- anti-aliased resampling ---------------------------------------------------
# Antialiased resizing (``F.interpolate(..., antialias=True)``) as two
# matmuls with weight matrices that depend on the sizes alone, applied at
# capture (``lazy/decompose.py``).
#
# ATen resizes separably: each output row is a normalized, weighted sum of
# input rows (the filter's support widened by the downscale factor), then the
# same along the columns. So ``out = A @ x @ B^T`` with ``A`` (OH x H) and
# ``B`` (OW x W). The matrices are made by ATen itself, on the host, from
# unit inputs (no user data is read): resizing H images, image k all ones on
# row k and zeros elsewhere, gives ``A`` column by column (each output row's
# weights sum to 1 along the other axis), and likewise ``B``. Before first use each pair
# is checked against ATen's own resize of a fixed pseudo-random image, and the
# op falls back if it does not match: a guard against a filter that is not
# separable. The gradient is ``A^T @ g @ B``.

_MAX_SIDE = 1024  # weight matrices up to 1024 x 1024 per side
_MAX_UNIT_ELEMENTS = 1 << 24  # host work to make them: n unit images of h x w


def _weights(op, in_hw, out_hw, align_corners, scales) -> tuple | None:
    """(A, B) float64 host matrices for ``op`` (the default overload) or None,
    computed on real host tensors outside the capture's tracing modes."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        return _host_weights(op, in_hw, out_hw, align_corners, scales)


@functools.lru_cache(maxsize=256)
def _host_weights(op, in_hw, out_hw, align_corners, scales) -> tuple | None:
    (h, w), (oh, ow) = in_hw, out_hw
    if max(h * h * w, w * w * h) > _MAX_UNIT_ELEMENTS:
        return None

    def unit_rows(n, along_h):  # n images, image k constant 1 on row (column) k
        eye = torch.eye(n, dtype=torch.float64)
        shape = (n, 1, n, 1) if along_h else (n, 1, 1, n)
        return eye.reshape(shape).expand(n, 1, h, w)

    a = op(unit_rows(h, True), [oh, ow], align_corners, *scales)[:, 0, :, 0].T.contiguous()
    b = op(unit_rows(w, False), [oh, ow], align_corners, *scales)[:, 0, 0, :].T.contiguous()
    probe = torch.rand(2, 1, h, w, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    expected = op(probe, [oh, ow], align_corners, *scales)
    if not torch.allclose(a @ probe @ b.T, expected, rtol=1e-9, atol=1e-12):
        return None
    return a, b


def _matrices(op, like, in_hw, out_hw, align_corners, scales):
    """(A, B) in ``like``'s dtype and device, or None when not covered."""
    if not like.is_floating_point() or like.dtype == torch.float64:
        return None
    if max(*in_hw, *out_hw) > _MAX_SIDE or 0 in (*in_hw, *out_hw):
        return None
    ab = _weights(op, tuple(in_hw), tuple(out_hw), align_corners, scales)
    return None if ab is None else [t.to(dtype=like.dtype, device=like.device) for t in ab]


def _resize(op):
    def resize(x, output_size, align_corners, scales_h=None, scales_w=None):
        ab = _matrices(op, x, x.shape[-2:], output_size, align_corners, (scales_h, scales_w)) \
            if x.dim() == 4 else None
        if ab is None:
            return NotImplemented
        out = aten.matmul.default(x, aten.t.default(ab[1]))         # (N, C, H, OW)
        return aten.matmul.default(ab[0], out)                       # (N, C, OH, OW)
    resize.__name__ = op.__name__.split(".")[0]
    return resize


def _resize_vec(default):
    def resize_vec(x, output_size, align_corners, scale_factors):
        if x.dim() != 4:
            return NotImplemented
        if output_size is None:  # ATen's rule: floor(size * scale), the scale kept for the kernel
            output_size = [int(s * f) for s, f in zip(x.shape[-2:], scale_factors)]
            scales = list(scale_factors)
        else:
            scales = [None, None]
        return default(x, list(output_size), align_corners, *scales)
    return resize_vec


def _resize_backward(op):
    def resize_backward(grad, output_size, input_size, align_corners, scales_h=None,
                        scales_w=None):
        ab = _matrices(op, grad, input_size[-2:], output_size, align_corners,
                       (scales_h, scales_w)) if len(input_size) == 4 else None
        if ab is None:
            return NotImplemented
        out = aten.matmul.default(grad, ab[1])                       # (N, C, OH, W)
        return aten.matmul.default(aten.t.default(ab[0]), out)       # (N, C, H, W)
    return resize_backward


_bilinear = _resize(aten._upsample_bilinear2d_aa.default)
_bicubic = _resize(aten._upsample_bicubic2d_aa.default)

register_decomposition(aten._upsample_bilinear2d_aa.default, scope=CAPTURE)(_bilinear)
register_decomposition(aten._upsample_bilinear2d_aa.vec, scope=CAPTURE)(_resize_vec(_bilinear))
register_decomposition(aten._upsample_bicubic2d_aa.default, scope=CAPTURE)(_bicubic)
register_decomposition(aten._upsample_bicubic2d_aa.vec, scope=CAPTURE)(_resize_vec(_bicubic))
register_decomposition(aten._upsample_bilinear2d_aa_backward.default, scope=CAPTURE)(
    _resize_backward(aten._upsample_bilinear2d_aa.default))
register_decomposition(aten._upsample_bicubic2d_aa_backward.default, scope=CAPTURE)(
    _resize_backward(aten._upsample_bicubic2d_aa.default))
# The plain (not anti-aliased) resizes are separable too; their forwards
# compile (torch's gather decompositions), their backwards have no torch
# dialect op nor decomposition and fell back (nn.Upsample(mode="bilinear")).
register_decomposition(aten.upsample_bilinear2d_backward.default, scope=CAPTURE)(
    _resize_backward(aten.upsample_bilinear2d.default))
register_decomposition(aten.upsample_bicubic2d_backward.default, scope=CAPTURE)(
    _resize_backward(aten.upsample_bicubic2d.default))


# -- before import: ops torch-mlir imports but cannot lower -----------------

def _window_scales(size, out, k, s, p, count_include_pad, divisor_override):
    """Per output position along one axis: 1 / that axis's factor of ATen's
    divisor (the window's length, clipped to input + padding, or to the input
    without ``count_include_pad``), and 0 for a window wholly in padding."""
    scales = []
    for o in range(out):
        start = o * s - p
        end = min(start + k, size + p)
        padded, clipped = end - start, min(end, size) - max(start, 0)
        length = padded if count_include_pad else clipped
        scales.append(0.0 if clipped <= 0 else (1.0 if divisor_override else 1.0 / length))
    return scales


def _constant_vector(values: list[float], like):
    """``values`` as a 1-d tensor, from ``full`` runs of equal values (before
    import ``torch.tensor`` would leave a ``detach_`` torch-mlir refuses)."""
    runs: list[list] = []
    for v in values:
        if runs and runs[-1][0] == v:
            runs[-1][1] += 1
        else:
            runs.append([v, 1])
    parts = [torch.full([n], v, dtype=like.dtype, device=like.device) for v, n in runs]
    return parts[0] if len(parts) == 1 else aten.cat.default(parts)


def whole_windows(size, kernel_size, stride, padding, ceil_mode, nd: int):
    """(kernel, stride, padding, ceil_mode) of the same pooling with each
    kernel longer than its padded input (``ceil_mode`` lets PyTorch take one)
    cut to that length, its stride set to it; None if no kernel is. Such an
    axis has one window: it starts at ``-padding``, and whatever its length,
    it ends clipped at ``size + padding``, so a kernel of exactly that length
    has the same window, the same divisor (clipped length, or the input's
    elements without ``count_include_pad``) and one output. ``ceil_mode``
    stays where another axis still has a partial window. torch-mlir lowers
    neither the long kernel nor, for the backward, ``ceil_mode``
    (EfficientNet's pooler: a 320-wide ``ceil_mode`` kernel over a 1x1 map).
    (2-d only in practice: 3-d pooling refuses a kernel longer than its
    input, in eager as here.)"""
    def per_axis(v):
        v = list(v)
        return v * nd if len(v) == 1 else v
    k, pad = per_axis(kernel_size), per_axis(padding)
    st = per_axis(stride) if stride else list(k)
    room = [h + 2 * p for h, p in zip(size[-nd:], pad)]
    if all(kk <= r for kk, r in zip(k, room)):
        return None
    st = [r if kk > r else s for kk, s, r in zip(k, st, room)]
    k = [min(kk, r) for kk, r in zip(k, room)]
    return k, st, pad, bool(ceil_mode) and any((r - kk) % s for kk, s, r in zip(k, st, room))


def _pooled_length(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """ATen's ``pooling_output_shape`` (dilation 1)."""
    out = (size + 2 * p - k + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + p else out


@register_decomposition(aten.avg_pool2d.default, scope=IMPORT)
def avg_pool2d(x, kernel_size, stride=(), padding=(0,), ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """A kernel longer than its padded input: ``whole_windows``. An
    unbatched input: batched (torch-mlir's lowering fails on it). ``ceil_mode``
    with a last window past the padded input: the windows' sums over the
    input padded with zeros to the windows' extent, times a constant table of
    ATen's divisors (``_window_scales``), as ``_avg_pool_backward`` does;
    torch-mlir's lowering of such windows fails in iree-compile when the
    axes differ ("inferred input/output operand #1 has shape's dimension #0
    to be 10, but found 5": a 3-row kernel over 3 rows, 2-wide over 5)."""
    whole = whole_windows(x.shape, kernel_size, stride, padding, ceil_mode, 2)
    if whole is not None:
        return aten.avg_pool2d.default(x, *whole, count_include_pad, divisor_override)
    if x.dim() == 3:
        return aten.squeeze.dim(aten.avg_pool2d.default(
            aten.unsqueeze.default(x, 0), kernel_size, stride, padding, ceil_mode,
            count_include_pad, divisor_override), 0)
    if not ceil_mode or not x.dtype.is_floating_point:
        return NotImplemented
    k = list(kernel_size) * 2 if len(kernel_size) == 1 else list(kernel_size)
    st = (list(stride) * 2 if len(stride) == 1 else list(stride)) if stride else k
    pad = list(padding) * 2 if len(padding) == 1 else list(padding)
    size = list(x.shape[-2:])
    out = [_pooled_length(*a, True) for a in zip(size, k, st, pad)]
    extra = [(o - 1) * s + kk - (h + 2 * p) for o, s, kk, h, p in zip(out, st, k, size, pad)]
    if all(e <= 0 for e in extra):  # (no window past the padded input: ceil_mode changes nothing)
        return aten.avg_pool2d.default(x, k, st, pad, False, count_include_pad,
                                       divisor_override)
    xp = aten.constant_pad_nd.default(x, [pad[1], pad[1] + max(extra[1], 0),
                                          pad[0], pad[0] + max(extra[0], 0)], 0.0)
    sums = aten.avg_pool2d.default(xp, k, st, [0, 0], False, True, 1)
    rows, cols = (_constant_vector(_window_scales(size[d], out[d], k[d], st[d], pad[d],
                                                  count_include_pad, divisor_override), x)
                  for d in (0, 1))
    result = aten.mul.Tensor(aten.mul.Tensor(sums, aten.reshape.default(rows, [out[0], 1])),
                             cols)
    return aten.div.Scalar(result, divisor_override) if divisor_override else result


def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                       divisor_override, nd: int):
    """The input gradient of ``nd``-d average pooling: the output gradient
    divided by each window's divisor (a constant table: shapes are static,
    so ``ceil_mode``'s shorter last windows and ``count_include_pad`` are
    exact), then a transposed convolution with a ones kernel, each channel on
    its own (channels folded into the batch: torch-mlir 20261001 miscompiles
    grouped transposed convolutions), cut to the input's extent past the
    padding."""
    def per_axis(v):
        v = list(v)
        return v * nd if len(v) == 1 else v
    whole = whole_windows(x.shape, kernel_size, stride, padding, ceil_mode, nd)
    if whole is not None:  # (the same windows, each kernel within its padded input)
        kernel_size, stride, padding, ceil_mode = whole
    k = per_axis(kernel_size)
    st = per_axis(stride) if stride else k
    pad = per_axis(padding)
    batched = x.dim() == nd + 2
    if not batched:
        x, grad = aten.unsqueeze.default(x, 0), aten.unsqueeze.default(grad, 0)
    n, c, size, out = x.shape[0], x.shape[1], list(x.shape[2:]), list(grad.shape[2:])
    scale = None
    for d in range(nd):
        axis = _constant_vector(_window_scales(size[d], out[d], k[d], st[d], pad[d],
                                               count_include_pad, divisor_override), grad)
        axis = aten.reshape.default(axis, [out[d]] + [1] * (nd - 1 - d))
        scale = axis if scale is None else aten.mul.Tensor(scale, axis)
    g = aten.mul.Tensor(grad, scale)
    if divisor_override:
        g = aten.div.Scalar(g, divisor_override)
    g = aten.reshape.default(g, [n * c, 1] + out)
    weight = torch.full([1, 1] + k, 1.0, dtype=grad.dtype, device=grad.device)
    full = aten.convolution.default(g, weight, None, st, [0] * nd, [1] * nd, True, [0] * nd, 1)
    for d in range(nd):  # full covers [-pad, (out - 1) * stride + k - pad) of the input
        short = pad[d] + size[d] - full.shape[2 + d]
        if short > 0:
            full = aten.constant_pad_nd.default(full, [0, 0] * (nd - 1 - d) + [0, short], 0.0)
        full = aten.slice.Tensor(full, 2 + d, pad[d], pad[d] + size[d])
    result = aten.reshape.default(full, [n, c] + size)
    return result if batched else aten.squeeze.dim(result, 0)


@register_decomposition(aten.avg_pool2d_backward.default, scope=IMPORT)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """torch-mlir lowers neither ``ceil_mode`` nor an empty ``stride`` here
    (EfficientNet's pooler: the whole graph ran eagerly)."""
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, 2)


@register_decomposition(aten.avg_pool3d_backward.default, scope=IMPORT)
def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """torch-mlir does not lower it (``nn.LocalResponseNorm`` pools in 3-d:
    the whole graph ran eagerly)."""
    return _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode,
                              count_include_pad, divisor_override, 3)


def _scatter_to_maxima(grad_output, x, indices, nd: int):
    """Each output gradient added at its maximum's place: ``indices`` are
    flat within each plane (the ``nd`` trailing dimensions) and adaptive
    windows may overlap, so a ``scatter_add`` over the flattened planes
    (ATen's kernel: ``grad_input[index] += grad_output``)."""
    lead = list(x.shape[:x.dim() - nd])
    plane = 1
    for n in x.shape[x.dim() - nd:]:
        plane *= n
    zeros = aten.new_zeros.default(grad_output, lead + [plane])
    g = aten.reshape.default(grad_output, lead + [-1])
    i = aten.reshape.default(indices, lead + [-1])
    return aten.reshape.default(aten.scatter_add.default(zeros, len(lead), i, g), list(x.shape))


@register_decomposition(aten.adaptive_max_pool2d_backward.default, scope=IMPORT)
def adaptive_max_pool2d_backward(grad_output, x, indices):
    """torch-mlir does not lower it: the graph ran eagerly every step (the
    sweep's nn/pooling)."""
    return _scatter_to_maxima(grad_output, x, indices, 2)


@register_decomposition(aten.adaptive_max_pool3d_backward.default, scope=IMPORT)
def adaptive_max_pool3d_backward(grad_output, x, indices):
    """As ``adaptive_max_pool2d_backward``, over 3-d planes."""
    return _scatter_to_maxima(grad_output, x, indices, 3)


@register_decomposition(aten.native_batch_norm.default, scope=IMPORT)
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    """Inference batch norm as ``_native_batch_norm_legit_no_training`` (what
    torch.export emits). PyTorch's own decomposition returns empty saved
    statistics in eval mode while the meta kernel (and so the captured graph)
    gives them the channel count; the statistics are unused in eval, so they
    come back as the running statistics to keep the shapes the graph expects."""
    if training:
        return NotImplemented
    out = aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean,
                                                             running_var, momentum, eps)[0]
    return out, aten.clone.default(running_mean), aten.clone.default(running_var)


@register_decomposition(aten._weight_norm_interface_backward.default, scope=CAPTURE)
def weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim):
    """The gradient of ``_weight_norm_interface`` (``w = v * g / ||v||``,
    the norm over every dimension but ``dim``), as ATen's
    ``_weight_norm_differentiable_backward``: ``s = sum(grad_w * v)``,
    ``grad_v = g / ||v|| * (grad_w - v * s / ||v||^2)``, ``grad_g = s / ||v||``.
    (``nn.utils.weight_norm``: wav2vec2's and HuBERT's positional convolution.)"""
    if saved_v.dtype not in (torch.float32, torch.float64):
        return NotImplemented  # (ATen accumulates half types in float32)
    dims = [d for d in range(saved_v.dim()) if d != dim % max(saved_v.dim(), 1)]
    sums = aten.sum.dim_IntList(aten.mul.Tensor(grad_w, saved_v), dims, True)
    square = aten.mul.Tensor(saved_norms, saved_norms)
    centred = aten.sub.Tensor(grad_w, aten.mul.Tensor(saved_v, aten.div.Tensor(sums, square)))
    grad_v = aten.mul.Tensor(aten.div.Tensor(saved_g, saved_norms), centred)
    return grad_v, aten.div.Tensor(sums, saved_norms)


def _shrink_backward(grad, x, lambd):
    """The gradient passes where ``x`` is outside ``[-lambd, lambd]``."""
    inside = aten.logical_and.default(aten.ge.Scalar(x, -lambd), aten.le.Scalar(x, lambd))
    return aten.where.self(inside, aten.zeros_like.default(grad), grad)


# (not in the torch dialect: the op ran eagerly every step, nn.Hardshrink, nn.Softshrink)
register_decomposition(aten.hardshrink_backward.default, scope=IMPORT)(_shrink_backward)
register_decomposition(aten.softshrink_backward.default, scope=IMPORT)(_shrink_backward)


def _adaptive_weights(size: int, out: int, like):
    """[out, size]: 1/len where input ``h`` is in output ``o``'s adaptive
    window (ATen's start floor(o*size/out), end ceil((o+1)*size/out))."""
    rows = []
    for o in range(out):
        start, end = (o * size) // out, -((-(o + 1) * size) // out)
        rows += [1.0 / (end - start) if start <= h < end else 0.0 for h in range(size)]
    return aten.reshape.default(_constant_vector(rows, like), [out, size])


@register_decomposition(aten._adaptive_avg_pool2d_backward.default, scope=IMPORT)
def adaptive_avg_pool2d_backward(grad, x):
    """Each axis's windows as a constant [out, in] matrix of 1/len: the input
    gradient is the output gradient contracted with both (ran eagerly every
    step: not in the torch dialect)."""
    if x.dim() != 4 or grad.dim() != 4:
        return NotImplemented
    (oh, ow), (h, w) = grad.shape[2:], x.shape[2:]
    rows = _adaptive_weights(h, oh, grad)                      # [oh, h]
    cols = _adaptive_weights(w, ow, grad)                      # [ow, w]
    left = aten.matmul.default(aten.transpose.int(rows, 0, 1), grad)   # [n, c, h, ow]
    return aten.matmul.default(left, cols)                     # [n, c, h, w]
