"""``resize_`` and ``resize_as_`` on lazy tensors.

A lazy tensor's wrapper cannot grow its (data-less) storage, so only a resize
to at most as many elements is supported: the tensor becomes the first
elements of its values, in the new shape, as in eager PyTorch. Growing
raises a clear error instead of PyTorch's internal assert.
"""
from __future__ import annotations

import math

import torch

from .. import metrics
from .capture import value_of
from ..graph.ir import TensorSpec
from .tensor import Storage, live_storages

aten = torch.ops.aten


def resize_(func, args, kwargs):
    t, size = args[0], [int(s) for s in args[1]]
    if list(t.shape) == size:
        return t
    n = math.prod(size)
    if n > t.numel():
        raise RuntimeError(
            f"lazy-mlir: resize_ cannot grow a lazy tensor (from {t.numel()} to {n} "
            "elements); make a new tensor instead, or resize it on the CPU")
    flat = aten.reshape.default(t, [-1])
    new = aten.clone.default(aten.reshape.default(aten.slice.Tensor(flat, 0, 0, n), size))
    stride = list(torch.empty(size, device="meta").stride())
    with torch.utils._mode_utils.no_dispatch():
        # Change the wrapper's sizes the way _inplace_view does (meta in TLS).
        was = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            aten.as_strided_.default(t, size, stride, 0)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(was)
    value = value_of(new)
    t._storage = Storage(value)  # the resized tensor no longer aliases its old views
    t._view = ()
    t._cache = None
    t.spec = TensorSpec(tuple(size), tuple(stride), 0, t.dtype)
    if value.pending:
        live_storages.add(t._storage)
    metrics.counter_inc("lazy::resize_")
    return t


def resize_as_(func, args, kwargs):
    return resize_(func, (args[0], list(args[1].shape)), {})


SPECIAL = {aten.resize_.default: resize_, aten.resize_as_.default: resize_as_}
