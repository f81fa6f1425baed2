"""The ``lazy`` device: Python kernels on PyTorch's ``Lazy`` dispatch key.

Only ops that create lazy tensors from nothing land here (factories, and the
copies PyTorch routes to the backend); every op on an existing lazy tensor goes
to ``LazyTensor.__torch_dispatch__``.
"""
from __future__ import annotations

import warnings

import torch

from .capture import data_value, emit
from .capturable import allow_lazy
from .foreach import prefer_foreach
from .fused_optim import prefer_fused
from .dispatch import _copy_
from .module_ties import keep_ties
from . import attention, rnn
from .sync import to_host
from .tensor import LazyTensor, wrap_value

aten = torch.ops.aten
_lib = None


def lazy_device(index: int = 0) -> torch.device:
    """The lazy device (``lazy:0``)."""
    return torch.device("lazy", index)


def _new(shape, dtype) -> LazyTensor:
    dtype = dtype or torch.get_default_dtype()
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
    """Factories computed on the host and uploaded (arange, eye, ...)."""
    def kernel(*args, **kwargs):
        kwargs["device"] = torch.device("cpu")
        host = op(*args, **kwargs)
        return wrap_value(data_value(host))
    return kernel


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
        rnn.register(_lib)  # nn.LSTM / nn.GRU as one node each way (AutogradLazy)
        attention.register(_lib)  # scaled_dot_product_attention, one node each way
    allow_lazy()  # Adam(..., capturable=True) on lazy parameters
    prefer_foreach()  # torch.optim's default update as foreach ops (one node each)
    prefer_fused()  # ... and Adam/AdamW/SGD's as their fused op (one node for all)
    keep_ties()  # tied weights stay tied through model.to("lazy")
