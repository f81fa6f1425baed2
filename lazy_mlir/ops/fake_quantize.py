"""Fake quantization (quantization-aware training), as the CPU kernels
compute it (``ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp``):

    q    = zero_point + nearbyint(x * (1.0f / scale))     (in x's float type)
    out  = (clamp(q, quant_min, quant_max) - zero_point) * scale
    mask = quant_min <= q <= quant_max                     (the gradient's mask)

``torch.ao.quantization.FakeQuantize`` calls the per-tensor form with its
scale and zero point as tensors and a ``fake_quant_enabled`` flag tensor
(``_fake_quantize_per_tensor_affine_cachemask_tensor_qparams``); the
per-tensor form with numbers and the per-channel form are its other
modules'. PyTorch has no meta kernel for any of them, so each ran eagerly,
a host round trip per quantized layer and step.

float32 only, with integer zero points (the dtype QAT trains in; the
kernels compute float64 and reduced-precision inputs in other types): the
rest falls back, counted. The backward (``grad * mask``) is PyTorch's own.
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten


def _fake_quantize(x, inv_scale, scale, zero_point, quant_min: int, quant_max: int,
                   cast_first: bool = False):
    """(out, mask); ``inv_scale`` is float32 ``1 / scale``, computed as the
    kernel does before it multiplies. The per-tensor kernel clamps ``q`` with
    fmax/fmin (a NaN takes the lower bound, inf the bound on its side); the
    per-channel one (``cast_first``) casts it to int64 first, which gives x86's
    INT64_MIN (the lower bound) for a NaN and for anything from 2**63 up."""
    q = aten.add.Tensor(aten.round.default(aten.mul.Tensor(x, inv_scale)), zero_point)
    mask = aten.logical_and.default(aten.ge.Scalar(q, quant_min), aten.le.Scalar(q, quant_max))
    to_min = (aten.logical_not.default(aten.lt.Scalar(q, 2.0 ** 63)) if cast_first
              else aten.isnan.default(q))
    clamped = aten.clamp.default(aten.where.ScalarSelf(to_min, quant_min, q),
                                 quant_min, quant_max)
    out = aten.mul.Tensor(aten.sub.Tensor(clamped, zero_point), scale)
    return out, mask


@register_decomposition(aten.fake_quantize_per_tensor_affine_cachemask.default, scope=CAPTURE)
def per_tensor(x, scale: float, zero_point: int, quant_min: int, quant_max: int):
    if x.dtype != torch.float32:
        return NotImplemented
    f32 = torch.tensor(scale, dtype=torch.float32)
    inv = float(torch.reciprocal(f32))  # (1.0f / scale: a float32, exact as a double)
    return _fake_quantize(x, inv, float(f32), zero_point, quant_min, quant_max)


@register_decomposition(aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,
                        scope=CAPTURE)
def per_tensor_qparams(x, scale, zero_point, fake_quant_enabled, quant_min: int,
                       quant_max: int):
    if (x.dtype != torch.float32 or zero_point.dtype.is_floating_point
            or scale.numel() != 1 or zero_point.numel() != 1 or fake_quant_enabled.numel() != 1):
        return NotImplemented
    s = aten._to_copy.default(aten.reshape.default(scale, []), dtype=torch.float32)
    z = aten.reshape.default(zero_point, [])
    out, mask = _fake_quantize(x, aten.reciprocal.default(s), s, z, quant_min, quant_max)
    on = aten.ne.Scalar(aten.reshape.default(fake_quant_enabled, []), 0)
    return aten.where.self(on, out, x), aten.logical_or.default(mask, aten.logical_not.default(on))


@register_decomposition(aten.fake_quantize_per_channel_affine_cachemask.default, scope=CAPTURE)
def per_channel(x, scale, zero_point, axis: int, quant_min: int, quant_max: int):
    if (x.dtype != torch.float32 or scale.dtype != torch.float32
            or zero_point.dtype.is_floating_point or scale.dim() != 1):
        return NotImplemented
    axis = axis % x.dim()
    shape = [-1 if d == axis else 1 for d in range(x.dim())]
    s = aten.reshape.default(scale, shape)
    z = aten.reshape.default(zero_point, shape)
    return _fake_quantize(x, aten.reciprocal.default(s), s, z, quant_min, quant_max,
                          cast_first=True)
