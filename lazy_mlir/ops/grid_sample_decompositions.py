"""``grid_sampler_3d`` (``F.grid_sample`` of a volume), applied at capture
(``lazy/decompose.py``): PyTorch decomposes only the 2-d sampler. This is
the same construction one dimension up, following ATen's CPU kernel
(GridSampler.cpp): unnormalize the grid, pad by zeros, border or
reflection, then a trilinear blend of the 8 neighbours (zero weight outside
the volume) or the nearest voxel (round half to even, as ``nearbyint``).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


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


GRID_SAMPLE_DECOMPOSITIONS = {
    aten.grid_sampler_3d.default: grid_sampler_3d,
}
