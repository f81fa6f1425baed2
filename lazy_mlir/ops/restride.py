"""Views whose input has other strides in the import re-trace than at capture.

A graph is captured with eager's strides (each op's meta kernel), then
re-traced on fake tensors through the IMPORT decompositions
(``pipeline/fx_graph.decompose``). A decomposition may give its result other
strides than the kernel it replaces: ``native_layer_norm``'s keeps a
permuted input's strides where the CPU kernel returns a contiguous tensor.
A ``view`` captured on the contiguous tensor then fails in the re-trace
(``Cannot view a tensor with shape [2, 4, 4, 32] and strides (512, 4, 1, 16)
as a tensor with shape (32, 32)``) and the whole graph ran eagerly
(ConvNeXt, Swin, speech encoders).

The imported program has value semantics: strides do not change any value.
So a ``view`` or ``_unsafe_view`` the re-trace's strides cannot express is
re-traced as a contiguous copy viewed (what ``reshape`` does); one they can
express stays itself (no copy). A view of a tensor with no elements is a
new tensor of its shape: torch-mlir's lowering of it divides by zero, which
killed the process (SIGFPE; lm.jit and torch.compile lower in it).
"""
from __future__ import annotations

import math

import torch

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten


def _infer_size(shape, numel: int) -> list[int]:
    """``shape`` with its ``-1`` (if any) resolved for ``numel`` elements."""
    shape = list(shape)
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = numel // known if known else 0
    return shape


def view_strides(old_shape, old_stride, new_shape) -> list[int] | None:
    """The strides of ``new_shape`` viewing a tensor of ``old_shape`` and
    ``old_stride`` without a copy, or None where no view can (ATen's
    ``computeStride``: every run of dimensions merged must be contiguous
    in memory)."""
    old_shape, old_stride = list(old_shape), list(old_stride)
    numel = math.prod(old_shape)
    if numel == 0:
        return None if old_shape != list(new_shape) else old_stride
    if not old_shape:
        return [1] * len(new_shape)
    new_stride = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1]
    tensor_numel = view_numel = 1
    for d in reversed(range(len(old_shape))):
        tensor_numel *= old_shape[d]
        if d == 0 or (old_shape[d - 1] != 1
                      and old_stride[d - 1] != tensor_numel * chunk_base):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_base = old_stride[d - 1]
                tensor_numel = view_numel = 1
    return new_stride if view_d == -1 else None


def _view_any_strides(x, size):
    shape = _infer_size(size, x.numel())
    if x.numel() == 0:  # torch-mlir's view lowering divides by the 0: SIGFPE, the process dies
        return aten.new_zeros.default(x, shape)
    if view_strides(x.shape, x.stride(), shape) is not None:
        return NotImplemented  # the op itself: a view of these strides exists
    dense = aten.clone.default(x, memory_format=torch.contiguous_format)
    return aten._unsafe_view.default(dense, shape)


register_decomposition(aten.view.default, scope=IMPORT)(_view_any_strides)
register_decomposition(aten._unsafe_view.default, scope=IMPORT)(_view_any_strides)
