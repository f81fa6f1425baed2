"""The lazy tensor: a wrapper subclass on the real ``lazy`` device.

A ``LazyTensor`` holds no data. It points at a ``Storage`` (the IR value of the
tensor it aliases, and a version bumped by every write) and a chain of view
steps from that storage to itself. Views and their base share one storage, so a
write through either is seen by both, exactly as in eager PyTorch.
"""
from __future__ import annotations

import itertools
import weakref

import torch

from .ir import TensorSpec, Value

LAZY = torch.device("lazy", 0)


class Storage:
    """The value behind a tensor and all its views."""

    __slots__ = ("value", "version", "seq", "__weakref__")

    def __init__(self, value: Value):
        self.value = value
        self.version = 0
        self.seq = None


class LiveStorages:
    """Storages that may hold pending values, in the order they first became
    pending: mark_step computes them in this order, so the same program gives
    the same graph (and cache key) every step."""

    def __init__(self):
        self._by_seq: "weakref.WeakValueDictionary[int, Storage]" = weakref.WeakValueDictionary()
        self._next = itertools.count()

    def add(self, s: Storage) -> None:
        if s.seq is None:
            s.seq = next(self._next)
            self._by_seq[s.seq] = s

    def discard(self, s: Storage) -> None:
        if s.seq is not None:
            self._by_seq.pop(s.seq, None)
            s.seq = None

    def __iter__(self):
        return iter(list(self._by_seq.values()))


live_storages = LiveStorages()


class LazyTensor(torch.Tensor):
    """A tensor on the ``lazy`` device whose value is a graph until needed."""

    _storage: Storage
    _view: tuple  # view steps (op, args, kwargs, output index) from the storage
    _cache: tuple | None  # (storage version, Value) of this view

    @staticmethod
    def __new__(cls, spec: TensorSpec, storage: Storage, view: tuple = (),
                requires_grad: bool = False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, spec.shape, strides=spec.stride, storage_offset=spec.offset,
            dtype=spec.dtype, device=LAZY, requires_grad=requires_grad)
        t._storage = storage
        t._view = view
        t._cache = None
        t.spec = spec
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from .capture import dispatch
        return dispatch(func, args, kwargs or {})

    def __repr__(self, *, tensor_contents=None):
        from .sync import to_host
        host = to_host(self)
        contents = torch._tensor_str._tensor_str(host, len("tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        return "tensor(" + text[len(type(self).__name__) + 1:]

    def tolist(self):
        return self.cpu().tolist()

    def numpy(self, *args, **kwargs):
        raise TypeError(
            "can't convert lazy:0 device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first.")

    __torch_function__ = torch._C._disabled_torch_function_impl

    spec: TensorSpec  # shape, strides, offset and dtype; kept in step with the wrapper


def wrap_value(value: Value) -> LazyTensor:
    """A new lazy tensor owning ``value`` as its own storage."""
    storage = Storage(value)
    if value.pending:
        live_storages.add(storage)
    return LazyTensor(value.spec, storage)
