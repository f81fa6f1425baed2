"""Decompositions for torch-dialect ops that torch-mlir 20261001 imports but
does not lower to linalg (they failed to compile and fell back).

- Reductions and scans over the one "dimension" of a 0-d tensor (``dim`` 0
  or -1): torch-mlir's patterns reject rank 0 and the op survives to the
  linalg backend contract. On a 0-d tensor each equals the op on the
  1-element 1-d tensor, reshaped back to 0-d. ``cumprod`` with a ``dtype``
  fails the same way: it converts first.
- Ops whose PyTorch decomposition (``torch._decomp``) torch-mlir lowers:
  ``*_copy`` view ops, ``upsample_bilinear2d``; ``empty_strided`` as ``empty``.
- ``log10``: IREE's CPU backend has no ``log10f`` to link against.
"""
from __future__ import annotations

import math

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

# Ops that take ``self`` first and reduce or scan along ``dim``.
_RANK0_OPS = [
    aten.amax.default, aten.amin.default, aten.argmax.default, aten.argmin.default,
    aten.all.dim, aten.any.dim, aten.max.dim, aten.min.dim, aten.prod.dim_int,
    aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default,
]


def _on_1d(op):
    def decomposition(x, *args, **kwargs):
        if x.dim() != 0:
            return NotImplemented  # traced as the op itself: not decomposed again
        out = op(aten.reshape.default(x, [1]), *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(aten.reshape.default(o, []) for o in out)
        return aten.reshape.default(out, [])
    decomposition.__name__ = f"{op.__name__}_on_0d"
    return decomposition


_cumprod_on_0d = _on_1d(aten.cumprod.default)


def cumprod(x, dim, dtype=None):
    """torch-mlir lowers ``cumprod`` only without ``dtype``: convert first."""
    if dtype is not None:
        return aten.cumprod.default(aten._to_copy.default(x, dtype=dtype), dim)
    return _cumprod_on_0d(x, dim)


def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    """Uninitialized memory has no values to keep; the compiled graph has value
    semantics, so the strides are the capture's business, not the compiler's."""
    return aten.empty.memory_format(size, dtype=dtype, layout=layout, device=device,
                                    pin_memory=pin_memory)


def new_empty_strided(x, size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return aten.new_empty.default(x, size, dtype=dtype, layout=layout, device=device,
                                  pin_memory=pin_memory)


def log10(x):
    return aten.mul.Tensor(aten.log.default(x), 1.0 / math.log(10.0))


_FROM_TORCH = [
    aten.view_copy.default, aten.permute_copy.default, aten.as_strided_copy.default,
    aten.unbind_copy.int, aten.upsample_bilinear2d.default,
]

LOWERING_DECOMPOSITIONS = {
    **get_decompositions(_FROM_TORCH),
    **{op: _on_1d(op) for op in _RANK0_OPS},
    aten.cumprod.default: cumprod,
    aten.log10.default: log10,
    aten.empty_strided.default: empty_strided,
    aten.new_empty_strided.default: new_empty_strided,
}
