"""The ``lazy`` device: Python kernels on PyTorch's ``Lazy`` dispatch key.

Only ops that create lazy tensors from nothing land here (factories, and the
copies PyTorch routes to the backend); every op on an existing lazy tensor goes
to ``LazyTensor.__torch_dispatch__``.
"""
from __future__ import annotations

import contextlib
import warnings
import weakref

import torch

from .capture import data_value, emit, empty_value
from .capturable import allow_lazy
from .shapes import const_key
from .state import factory_values as _factory_values
from .foreach import prefer_foreach
from .fused_optim import prefer_fused
from .dispatch import _copy_
from .module_ties import keep_ties
from . import attention, autocast, ctc, linear, rnn
from .mha import prefer_split_heads
from .sync import to_host
from .tensor import LazyTensor, wrap_value

aten = torch.ops.aten
_lib = None


def lazy_device(index: int = 0) -> torch.device:
    """The lazy device (``lazy:0``)."""
    return torch.device("lazy", index)


def _new(shape, dtype) -> LazyTensor:
    dtype = dtype or torch.get_default_dtype()
    if 0 in shape:  # nothing to compute: shared empty data (capture.empty_value)
        return wrap_value(empty_value(tuple(shape), dtype))
    return wrap_value(emit(aten.zeros.default, (list(shape),), {"dtype": dtype})[0])


def _empty_memory_format(size, dtype=None, layout=None, device=None, pin_memory=None,
                         memory_format=None):
    return _new(size, dtype)


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    return _new(size, dtype)


def _copy_from(self, dst, non_blocking=False):
    if isinstance(dst, LazyTensor):
        return _copy_(None, (dst, self), {})
    dst.copy_(to_host(self))
    return dst


def _copy_from_and_resize(self, dst):
    return _copy_from(self, dst)


def _host_factory(op):
    """Factories computed on the host and uploaded (arange, eye, ...). The
    deterministic ones keep their value per constant arguments: a step's
    ``arange`` (GPT-2's positions) is then the same device data every step,
    uploaded once, not computed, uploaded and made a new input each step.
    Sharing it is safe: nothing writes device data (a write rebinds the
    tensor's storage)."""
    def kernel(*args, **kwargs):
        return wrap_value(factory_value(op, args, kwargs))
    return kernel


def _zero_tensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """``_efficientzerotensor`` (forward-mode AD's zero tangents:
    ``torch.func.hessian``, ``jacfwd(jacrev(f))``) as plain zeros: the lazy
    device had no kernel for it ("Could not run 'aten::_efficientzerotensor'
    with arguments from the 'Lazy' backend")."""
    return wrap_value(factory_value(aten.zeros.default, (list(size),), {"dtype": dtype}))


def factory_value(op, args, kwargs):
    """The value of a host factory's call (shared per constant arguments
    where deterministic; then ``made_by`` its data gives the call)."""
    kwargs = dict(kwargs, device=_CPU)
    if _in_graph[0] and op not in _RANDOM_FACTORIES:
        return emit(op, tuple(args), kwargs)[0]
    key = _factory_key(op, args, kwargs) if op not in _RANDOM_FACTORIES else None
    if key is not None:
        value = _factory_values.get(key)
        if value is not None:
            return value
    value = data_value(op(*args, **kwargs))
    if key is not None:
        _made[value.data] = (op, args, kwargs)
        if _numel(value.spec.shape) <= _SHARED_NUMEL:
            if len(_factory_values) >= 256:
                _factory_values.clear()
            _factory_values[key] = value
    return value


def made_by(data) -> tuple | None:
    """(op, args, kwargs) of the deterministic host factory call whose
    result ``data`` is (``compile_train_step`` makes it again at a new
    batch size: ``arange(t)``); None for other data."""
    return _made.get(data)


_made: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_in_graph = [0]


@contextlib.contextmanager
def factories_in_graph():
    """Deterministic host factories recorded as graph ops instead (export
    with dynamic dimensions: ``arange(t)`` then follows the dynamic size)."""
    _in_graph[0] += 1
    try:
        yield
    finally:
        _in_graph[0] -= 1


_CPU = torch.device("cpu")
_RANDOM_FACTORIES = {aten.randperm.default, aten.randperm.generator}
_SHARED_NUMEL = 4096  # (bounds what the table holds: a larger one lives as long as its tensors)


def _factory_key(op, args, kwargs):
    """(op, the arguments keyed as ``shapes.const_key`` does), or None for
    an argument it cannot key."""
    try:
        return (op, tuple(const_key(a) for a in args),
                tuple((k, const_key(v)) for k, v in kwargs.items()))
    except TypeError:
        return None


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


HOST_FACTORIES = ["arange", "arange.start", "arange.start_step", "eye", "eye.m", "linspace",
                  "logspace", "randperm", "randperm.generator", "scalar_tensor",
                  "tril_indices", "triu_indices"]


def register() -> None:
    """Install the kernels (once per process)."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # overriding kernels of the TorchScript backend
        _lib.impl("empty.memory_format", _empty_memory_format, "Lazy")
        _lib.impl("empty_strided", _empty_strided, "Lazy")
        _lib.impl("_copy_from", _copy_from, "Lazy")
        _lib.impl("_copy_from_and_resize", _copy_from_and_resize, "Lazy")
        for name in HOST_FACTORIES:
            base, _, overload = name.partition(".")
            op = getattr(getattr(aten, base), overload or "default")
            _lib.impl(name, _host_factory(op), "Lazy")
        _lib.impl("_efficientzerotensor", _zero_tensor, "Lazy")
        rnn.register(_lib)  # nn.LSTM / nn.GRU as one node each way (AutogradLazy)
        ctc.register(_lib)  # F.ctc_loss, one node each way, lengths in the graph
        attention.register(_lib)  # scaled_dot_product_attention, one node each way
        linear.register(_lib)  # F.linear, one node (not t, view, addmm, view)
    allow_lazy()  # Adam(..., capturable=True) on lazy parameters
    autocast.answer_for_lazy()  # torch.is_autocast_enabled("lazy"), get_autocast_dtype
    autocast.accept_lazy_in_torch_autocast()  # torch.autocast("lazy") is lm.autocast
    prefer_foreach()  # torch.optim's default update as foreach ops (one node each)
    prefer_fused()  # ... and Adam/AdamW/SGD's as their fused op (one node for all)
    keep_ties()  # tied weights stay tied through model.to("lazy")
    prefer_split_heads()  # nn.MultiheadAttention's self-attention with fewer views
