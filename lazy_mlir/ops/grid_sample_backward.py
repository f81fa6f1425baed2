"""``grid_sampler_2d_backward`` and ``grid_sampler_3d_backward`` at capture
time: the backward of ``F.grid_sample`` (the spatial transformer network,
optical-flow warping), which ran eagerly every step. PyTorch decomposes the
2-d forward only, and autograd's formula for it is the backward op.

Both gradients follow ATen's CPU kernel (GridSamplerKernel.cpp), for
bilinear/trilinear (0) and nearest (1) sampling and every padding mode:

- the input's: each output's gradient times each neighbour's weight, added
  at that neighbour (``scatter_add`` over the flattened plane); a neighbour
  outside the input gets nothing.
- the grid's (linear only; nearest has none, zeros as ATen): per coordinate,
  the sum over channels of the gradient times the neighbours' values times
  the weight's slope along that axis, times the slope of the coordinate's
  mapping to the input (unnormalize, then ``clip``/``reflect``: ATen counts
  a clipped border as outside, slope 0, and a reflection flips the sign).

Bicubic sampling and float64 keep the op.
"""
from __future__ import annotations

import itertools

import torch

from .nn import _clip, _reflect, _unnormalize
from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten


def _clip_slope(coords, size):
    """ATen's clip_coordinates_set_grad: 1 strictly inside (0, size - 1)."""
    return ((coords > 0) & (coords < size - 1)).to(coords.dtype)


def _reflect_slope(coords, twice_low, twice_high):
    """ATen's reflect_coordinates_set_grad: +1 or -1 by the side of ``low``
    and the parity of the flips, 0 for a one-point span."""
    if twice_low == twice_high:
        return torch.zeros_like(coords)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    shifted = coords - low
    sign = torch.where(shifted < 0, -1.0, 1.0).to(coords.dtype)
    flips = torch.floor(shifted.abs() / span)
    return torch.where(torch.floor(flips / 2) * 2 == flips, sign, -sign)


def _source_and_slope(coords, size, padding_mode, align_corners):
    """The input coordinate of a grid coordinate and its derivative."""
    slope = (size - 1) / 2 if align_corners else size / 2
    coords = _unnormalize(coords, size, align_corners)
    if padding_mode == 0:
        return coords, torch.full_like(coords, slope)
    if padding_mode == 2:
        twice = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
        reflect = _reflect_slope(coords, *twice)
        coords = _reflect(coords, *twice)
    else:
        reflect = 1
    return _clip(coords, size), slope * reflect * _clip_slope(coords, size)


def _backward(grad, a, grid, interpolation_mode, padding_mode, align_corners, output_mask):
    if interpolation_mode not in (0, 1) or padding_mode not in (0, 1, 2):
        return NotImplemented
    if a.dtype not in (torch.float32, torch.float16, torch.bfloat16) or grad.dtype != a.dtype:
        return NotImplemented
    n, c, *sizes = a.shape                      # spatial sizes, outermost first
    if 0 in a.shape or 0 in grid.shape:
        return NotImplemented
    d = len(sizes)
    out_shape = grid.shape[1:-1]
    q = grid[..., 0].numel() // n               # output points per plane
    # grid's last axis is (x, y[, z]): x indexes the innermost size
    located = [_source_and_slope(grid[..., k], sizes[d - 1 - k], padding_mode, align_corners)
               for k in range(d)]
    coords = [loc[0] for loc in located]
    plane = a.reshape(n, c, -1)
    grad_q = grad.reshape(n, c, q)
    grad_input = torch.zeros_like(plane) if output_mask[0] else None

    def corner(points):
        """(flat index, inside) of integer points, one per grid coordinate."""
        inside, flat = None, None
        for k, p in enumerate(points):
            size = sizes[d - 1 - k]
            ok = (p >= 0) & (p < size)
            inside = ok if inside is None else inside & ok
        for k in reversed(range(d)):            # outermost (z or y) first
            stride = 1
            for s in sizes[d - k:]:
                stride *= s
            term = torch.where(inside, points[k], 0).to(torch.int64) * stride
            flat = term if flat is None else flat + term
        return flat.reshape(n, 1, q), inside.reshape(n, 1, q)

    def scatter(flat, inside, weight):
        nonlocal grad_input
        if grad_input is not None:
            src = grad_q * torch.where(inside, weight.reshape(n, 1, q), 0)
            grad_input = grad_input.scatter_add(2, flat.expand(n, c, q), src)

    if interpolation_mode == 1:
        flat, inside = corner([torch.round(x) for x in coords])
        scatter(flat, inside, torch.ones_like(coords[0]))
        grad_grid = torch.zeros_like(grid) if output_mask[1] else None
    else:
        low = [torch.floor(x) for x in coords]
        frac = [x - f for x, f in zip(coords, low)]
        slopes = [torch.zeros_like(grad_q) for _ in range(d)]
        for offsets in itertools.product((0, 1), repeat=d):
            factors = [f if o else 1 - f for f, o in zip(frac, offsets)]
            flat, inside = corner([f + o for f, o in zip(low, offsets)])
            weight = factors[0]
            for f in factors[1:]:
                weight = weight * f
            scatter(flat, inside, weight)
            if output_mask[1]:
                value = torch.where(inside, plane.gather(2, flat.expand(n, c, q)), 0)
                g_value = grad_q * value
                for k in range(d):
                    others = None
                    for j, f in enumerate(factors):
                        if j != k:
                            others = f if others is None else others * f
                    side = others.reshape(n, 1, q) if offsets[k] else -others.reshape(n, 1, q)
                    slopes[k] = slopes[k] + g_value * side
        grad_grid = None
        if output_mask[1]:
            grad_grid = torch.stack(
                [slopes[k].sum(1).reshape(n, *out_shape) * located[k][1] for k in range(d)], -1)
    if grad_input is not None:
        grad_input = grad_input.reshape(a.shape)
    return grad_input, grad_grid


@register_decomposition(aten.grid_sampler_2d_backward.default, scope=CAPTURE)
def grid_sampler_2d_backward(grad, a, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    return _backward(grad, a, grid, interpolation_mode, padding_mode, align_corners, output_mask)


@register_decomposition(aten.grid_sampler_3d_backward.default, scope=CAPTURE)
def grid_sampler_3d_backward(grad, a, grid, interpolation_mode, padding_mode, align_corners,
                             output_mask):
    return _backward(grad, a, grid, interpolation_mode, padding_mode, align_corners, output_mask)
