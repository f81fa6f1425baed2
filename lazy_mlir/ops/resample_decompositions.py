"""Antialiased resizing (``F.interpolate(..., antialias=True)``) as two
matmuls with weight matrices that depend on the sizes alone, applied at
capture (``lazy/decompose.py``).

ATen resizes separably: each output row is a normalized, weighted sum of
input rows (the filter's support widened by the downscale factor), then the
same along the columns. So ``out = A @ x @ B^T`` with ``A`` (OH x H) and
``B`` (OW x W). The matrices are made by ATen itself, on the host, from
unit inputs (no user data is read): resizing H images, image k all ones on
row k and zeros elsewhere, gives ``A`` column by column (each output row's
weights sum to 1 along the other axis), and likewise ``B``. Before first use each pair
is checked against ATen's own resize of a fixed pseudo-random image, and the
op falls back if it does not match: a guard against a filter that is not
separable. The gradient is ``A^T @ g @ B``.
"""
from __future__ import annotations

import functools

import torch

aten = torch.ops.aten

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

RESAMPLE_DECOMPOSITIONS = {
    aten._upsample_bilinear2d_aa.default: _bilinear,
    aten._upsample_bilinear2d_aa.vec: _resize_vec(_bilinear),
    aten._upsample_bicubic2d_aa.default: _bicubic,
    aten._upsample_bicubic2d_aa.vec: _resize_vec(_bicubic),
    aten._upsample_bilinear2d_aa_backward.default:
        _resize_backward(aten._upsample_bilinear2d_aa.default),
    aten._upsample_bicubic2d_aa_backward.default:
        _resize_backward(aten._upsample_bicubic2d_aa.default),
}
