"""Random ops the dialect lacks, applied at capture (``lazy/decompose.py``),
written as the host-drawn fills eager itself makes (``normal_``, ``random_``
on an empty tensor, then arithmetic): the same generator stream as eager
CPU, so ``torch.manual_seed`` gives the same numbers. Each returns
``NotImplemented`` for what it does not cover (an explicit generator).
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten


def _fill_normal(shape, dtype, device, std):
    return aten.normal_.default(torch.empty(shape, dtype=dtype, device=device), 0.0, std)


@register_decomposition(aten.normal.Tensor_Tensor, scope=CAPTURE)
def normal_tensor_tensor(mean, std, *, generator=None):
    """ATen: ``out.normal_(0, 1); out.mul_(std).add_(mean)``."""
    if generator is not None:
        return NotImplemented
    shape = torch.broadcast_shapes(mean.shape, std.shape)
    dtype = torch.result_type(mean, std)
    return aten.add.Tensor(aten.mul.Tensor(_fill_normal(shape, dtype, mean.device, 1.0), std),
                           mean)


@register_decomposition(aten.normal.Tensor_float, scope=CAPTURE)
def normal_tensor_float(mean, std=1.0, *, generator=None):
    """ATen: ``out.normal_(0, std); out.add_(mean)``."""
    if generator is not None:
        return NotImplemented
    return aten.add.Tensor(_fill_normal(mean.shape, mean.dtype, mean.device, std), mean)


@register_decomposition(aten.normal.float_Tensor, scope=CAPTURE)
def normal_float_tensor(mean, std, *, generator=None):
    """ATen: ``out.normal_(0, 1); out.mul_(std).add_(mean)``."""
    if generator is not None:
        return NotImplemented
    return aten.add.Scalar(aten.mul.Tensor(_fill_normal(std.shape, std.dtype, std.device, 1.0),
                                           std), mean)


@register_decomposition([aten.randint_like.default, aten.randint_like.low_dtype], scope=CAPTURE)
def randint_like(x, low, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    """ATen: ``empty_like(x).random_(low, high)``, which draws as
    ``random_(high - low) + low`` (``random_.from`` is not used: fx cannot
    print an op named ``from``)."""
    if high is None:
        low, high = 0, low
    if not (isinstance(low, int) and isinstance(high, int)) or layout not in (None, torch.strided):
        return NotImplemented
    if max(abs(low), abs(high)) >= 2 ** 24:  # float results above 2**24 would round
        return NotImplemented
    out = torch.empty_like(x, dtype=dtype, memory_format=memory_format or torch.preserve_format)
    out = aten.random_.to(out, high - low)
    return aten.add.Scalar(out, low) if low else out


# Ops above whose decomposition may draw random numbers (all of them) (see ``lazy/decompose.py``).
SAME_RANDOM_STREAM = {aten.normal.Tensor_Tensor, aten.normal.Tensor_float,
                      aten.normal.float_Tensor, aten.randint_like.default,
                      aten.randint_like.low_dtype}
