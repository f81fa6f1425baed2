"""lazy-mlir: lazy tensors for PyTorch, compiled through MLIR and IREE.

``import lazy_mlir as lm`` makes the ``lazy`` device usable::

    model.to("lazy"); ...; lm.mark_step()
"""
from __future__ import annotations

from .lazy import metrics
from .lazy.device import lazy_device, register as _register
from .lazy.sync import mark_step, set_target, wait_device_ops

_register()

__all__ = ["lazy_device", "mark_step", "wait_device_ops", "metrics", "set_target"]
__version__ = "0.1.0"
