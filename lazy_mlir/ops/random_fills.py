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


def _empty_like(x, dtype, memory_format):
    return torch.empty_like(x, dtype=dtype, memory_format=memory_format or torch.preserve_format)


@register_decomposition(aten.randn_like.default, scope=CAPTURE)
def randn_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """ATen: ``empty_like(x).normal_(0, 1)``."""
    if layout not in (None, torch.strided):
        return NotImplemented
    return aten.normal_.default(_empty_like(x, dtype, memory_format), 0.0, 1.0)


@register_decomposition(aten.rand_like.default, scope=CAPTURE)
def rand_like(x, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """ATen: ``empty_like(x).uniform_(0, 1)``."""
    if layout not in (None, torch.strided):
        return NotImplemented
    return aten.uniform_.default(_empty_like(x, dtype, memory_format), 0.0, 1.0)


@register_decomposition(aten.bernoulli.p, scope=CAPTURE)
def bernoulli_p(x, p=0.5, *, generator=None):
    """ATen: ``empty_like(x, contiguous).bernoulli_(p)``."""
    if generator is not None:
        return NotImplemented
    return aten.bernoulli_.float(torch.empty(x.shape, dtype=x.dtype, device=x.device), p)


@register_decomposition(aten.bernoulli.default, scope=CAPTURE)
def bernoulli(p, *, generator=None):
    """ATen: ``empty_like(p, contiguous).bernoulli_(p)``, whose CPU kernel
    draws one uniform number per element (float64 for a float64 ``p``, else
    float32) and keeps ``u < p``: the same as ``bernoulli_uniform``, written
    so that ``p`` stays in the graph (``bernoulli_`` of a host ``p`` would
    read it)."""
    if generator is not None or not p.dtype.is_floating_point:
        return NotImplemented
    return bernoulli_uniform(torch.empty(p.shape, dtype=p.dtype, device=p.device), p)


def bernoulli_uniform(out, p):
    """What ``out.bernoulli_(p)`` writes, as eager CPU draws it (in
    ``out``'s memory order)."""
    u_dtype = torch.float64 if p.dtype == torch.float64 else torch.float32
    u = aten.uniform_.default(torch.empty_like(out, dtype=u_dtype), 0.0, 1.0)
    return aten.lt.Tensor(u, p.to(u_dtype)).to(out.dtype)


def _fill_of_copy(fill):
    """``fill(x, ...)`` functional: ATen clones ``x`` and fills the clone in place."""
    def decomposition(x, *args, generator=None, **kwargs):
        if generator is not None:
            return NotImplemented
        return fill(torch.empty_like(x), *args, **kwargs)
    return decomposition


_FUNCTIONAL_FILLS = {aten.uniform.default: aten.uniform_.default,
                     aten.exponential.default: aten.exponential_.default,
                     aten.geometric.default: aten.geometric_.default,
                     aten.log_normal.default: aten.log_normal_.default,
                     aten.cauchy.default: aten.cauchy_.default}
for _functional, _fill in _FUNCTIONAL_FILLS.items():
    register_decomposition(_functional, scope=CAPTURE)(_fill_of_copy(_fill))

# Ops above whose decomposition may draw random numbers (all of them) (see ``lazy/decompose.py``).
SAME_RANDOM_STREAM = {aten.normal.Tensor_Tensor, aten.normal.Tensor_float,
                      aten.normal.float_Tensor, aten.randint_like.default,
                      aten.randint_like.low_dtype, aten.randn_like.default,
                      aten.rand_like.default, aten.bernoulli.p, aten.bernoulli.default,
                      *_FUNCTIONAL_FILLS}
