"""The lazy tensor: a wrapper subclass on the real ``lazy`` device.

A ``LazyTensor`` holds no data. It points at a ``Storage`` (the IR value of the
tensor it aliases, and a version bumped by every write) and a chain of view
steps from that storage to itself. Views and their base share one storage, so a
write through either is seen by both, exactly as in eager PyTorch.
"""
from __future__ import annotations

import copy
import itertools
import weakref

import torch

from ..graph.ir import TensorSpec, Value

LAZY = torch.device("lazy", 0)


def _not_installed(*args, **kwargs):
    raise RuntimeError("lazy-mlir: lazy_mlir.lazy.dispatch and .sync are not imported "
                       "(import lazy_mlir, which imports them)")


# Hooks into the layers above (this module is the bottom of lazy/): each is
# installed once, when its module is imported, and lazy/__init__ imports both,
# so no lazy tensor exists before they are set. Module globals, not imports:
# ``__torch_dispatch__`` runs on every op, and an import statement there costs
# a module lookup each time.
_dispatch = _not_installed  # dispatch.dispatch(func, args, kwargs): routes every aten op
_to_host = _not_installed   # sync.to_host(t): the host value of a lazy tensor (repr)
_backward = torch.Tensor.backward  # backward.backward: the backward as one node
_reduce = _not_installed    # serialization.reduce_ex(t, proto): how pickle writes a lazy tensor
hooked: weakref.WeakSet = weakref.WeakSet()  # lazy tensors with a backward hook


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
    the same graph (and cache key) every step.

    Held by plain weak references (no callback): most storages are
    intermediates that die within the step, and a ``WeakValueDictionary``
    insert plus its removal callback are two Python calls per captured op.
    Dead references are dropped when the table doubles, and on
    iteration."""

    def __init__(self):
        self._by_seq: dict[int, weakref.ref] = {}
        self._next = itertools.count()
        self._prune_at = 1024

    def add(self, s: Storage) -> None:
        if s.seq is None:
            s.seq = next(self._next)
            by_seq = self._by_seq
            by_seq[s.seq] = weakref.ref(s)
            if len(by_seq) >= self._prune_at:
                self._prune()

    def _prune(self) -> None:
        self._by_seq = {k: r for k, r in self._by_seq.items() if r() is not None}
        self._prune_at = max(1024, 2 * len(self._by_seq))

    def discard(self, s: Storage) -> None:
        if s.seq is not None:
            self._by_seq.pop(s.seq, None)
            s.seq = None

    def __iter__(self):
        self._prune()
        alive = [r() for r in self._by_seq.values()]
        return iter([s for s in alive if s is not None])  # a collection may run meanwhile


live_storages = LiveStorages()


class LazyUntypedStorage(torch.UntypedStorage):
    """What ``untyped_storage()`` of a lazy tensor returns: the wrapper's
    storage (no memory) that answers ``data_ptr()`` with an id of the lazy
    ``Storage`` and ``nbytes()`` with its size. Code that tells shared tensors
    apart by ``(device, data_ptr, nbytes)`` (safetensors; ``transformers``'
    ``save_pretrained`` and its tied weights) then sees a view and its base
    share a storage and two tensors not, as on any device; the wrapper's own
    storage raises on ``data_ptr()``."""

    def data_ptr(self) -> int:
        return self._lazy_id

    def nbytes(self) -> int:
        return self._lazy_nbytes


def untyped_storage_of(t: "LazyTensor") -> LazyUntypedStorage:
    s = torch.Tensor.untyped_storage(t)
    s.__class__ = LazyUntypedStorage  # the same C object; only the two answers differ
    spec = t._storage.value.spec
    s._lazy_id = id(t._storage)
    s._lazy_nbytes = spec.dtype.itemsize * _numel(spec.shape)
    return s


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


_OWN_STATE = frozenset(("_storage", "spec", "_view", "_cache"))  # a LazyTensor's own


class LazyTensor(torch.Tensor):
    """A tensor on the ``lazy`` device whose value is a graph until needed."""

    _storage: Storage
    # Class-level defaults: most tensors are no view, and each attribute set
    # on a tensor costs a dict write per captured op.
    _view: tuple = ()  # view steps (op, args, kwargs, output index) from the storage
    _cache: tuple | None = None  # (storage version, Value) of this view

    @staticmethod
    def __new__(cls, spec: TensorSpec, storage: Storage, view: tuple = (),
                requires_grad: bool = False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, spec.shape, strides=spec.stride, storage_offset=spec.offset,
            dtype=spec.dtype, device=LAZY, requires_grad=requires_grad)
        t._storage = storage
        if view:
            t._view = view
        t.spec = spec
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    def __repr__(self, *, tensor_contents=None):
        host = _to_host(self)
        contents = torch._tensor_str._tensor_str(host, len("tensor("))
        text = torch._tensor_str._str_intern(self, tensor_contents=contents)
        return "tensor(" + text[len(type(self).__name__) + 1:]

    def __format__(self, format_spec):
        # torch formats a 0-d tensor as its number only when its type is
        # exactly Tensor: f"expert_{idx}" (Switch Transformers' expert keys)
        # read "expert_tensor(1, device='lazy:0')" and missed its ModuleDict
        if self.dim() == 0:
            return self.item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        return _backward(self, gradient, retain_graph, create_graph, inputs)

    # A backward reaching a hooked tensor runs on autograd's own engine
    # (backward.py): its hooks see what they see in eager, when they do.
    def register_hook(self, hook):
        hooked.add(self)
        return super().register_hook(hook)

    def register_post_accumulate_grad_hook(self, hook):
        hooked.add(self)
        return super().register_post_accumulate_grad_hook(hook)

    # ``retain_grad`` is a hook too (C++'s, that sets ``.grad``): through the
    # traced one-node backward it kept the trace's fake gradient.
    def retain_grad(self):
        if self.requires_grad and self.grad_fn is not None:
            hooked.add(self)
        return super().retain_grad()

    # Pickled as its value, a CPU tensor (``torch.save``): the graph behind
    # it holds locks and compiled modules, which no file can.
    def __reduce_ex__(self, proto):
        return _reduce(self, proto)

    # ``copy.deepcopy`` (AveragedModel's EMA copy of a model, ``deepcopy(model)``):
    # torch's own clones, then sets the clone's ``__dict__`` to a deep copy of
    # this one's, replacing the clone's storage with a copy of this tensor's
    # pending graph that no mark_step knows: the copy's updates piled up as one
    # ever longer pending graph, run again at every read. The clone keeps its
    # own state; only the user's attributes (``_is_param``, ...) are copied.
    def __deepcopy__(self, memo):
        if not self.is_leaf:
            return torch.Tensor.__deepcopy__(self, memo)  # (its error)
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = self.clone()
            if self.requires_grad:
                new.requires_grad_()
            if self.grad is not None:
                new.grad = copy.deepcopy(self.grad, memo)
            extra = {k: v for k, v in self.__dict__.items() if k not in _OWN_STATE}
            if extra:
                new.__dict__.update(copy.deepcopy(extra, memo))
        memo[id(self)] = new
        return new

    def tolist(self):
        return self.cpu().tolist()

    def untyped_storage(self):
        return untyped_storage_of(self)

    def numpy(self, *args, **kwargs):
        raise TypeError(
            "can't convert lazy:0 device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first.")

    __torch_function__ = torch._C._disabled_torch_function_impl

    spec: TensorSpec  # shape, strides, offset and dtype; kept in step with the wrapper


# ``LazyTensor(spec, storage, view)`` without its Python ``__new__`` and with
# the wrapper's arguments by position (their parsing by name costs ~0.2 us):
# every captured op makes one or more (~0.35 us less each).
_make = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided


def wrap_value(value: Value) -> LazyTensor:
    """A new lazy tensor owning ``value`` as its own storage."""
    storage = Storage(value)
    if value.data is None:  # pending (the property costs a call per op)
        live_storages.add(storage)
    spec = value.spec
    t = _make(LazyTensor, spec.shape, spec.stride, spec.offset, None, spec.dtype, _STRIDED, LAZY)
    t._storage = storage
    t.spec = spec
    return t


def new_view(spec: TensorSpec, storage: Storage, view: tuple) -> LazyTensor:
    """``LazyTensor(spec, storage, view)``: a view (no gradient) of ``storage``."""
    t = _make(LazyTensor, spec.shape, spec.stride, spec.offset, None, spec.dtype, _STRIDED, LAZY)
    t._storage = storage
    if view:
        t._view = view
    t.spec = spec
    return t


def _faster_dispatch_rule_lookup() -> None:
    """PyTorch calls ``torch._library.simple_registry.find_torch_dispatch_rule``
    before every ``__torch_dispatch__`` of a subclass (is a rule registered
    for this op and class?): three Python calls, ~0.4 us a captured op,
    where one dict lookup answers when the op has no entry (every aten op
    capture sees: entries exist only for ops given rules or fake kernels).
    The replacement answers the same; PyTorch's C++ looks the function up
    once, at the first subclass dispatch of the process, so it applies only
    when lazy_mlir is imported before any (else nothing changes)."""
    try:
        from torch._library import simple_registry
        entries = simple_registry.singleton._data
        original = simple_registry.find_torch_dispatch_rule
    except (ImportError, AttributeError):
        return
    if not isinstance(entries, dict) or getattr(original, "_lazy_mlir", False):
        return

    def find_torch_dispatch_rule(op, torch_dispatch_class):
        entry = entries.get(op.__qualname__)
        return None if entry is None else entry.torch_dispatch_rules.find(torch_dispatch_class)

    find_torch_dispatch_rule._lazy_mlir = True
    simple_registry.find_torch_dispatch_rule = find_torch_dispatch_rule


_faster_dispatch_rule_lookup()
