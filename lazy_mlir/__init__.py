"""lazy-mlir: lazy tensors for PyTorch, compiled through MLIR and IREE.

``import lazy_mlir as lm`` makes the ``lazy`` device usable::

    model.to("lazy"); ...; lm.mark_step()

It also points ``torch._lazy.mark_step / wait_device_ops / metrics.*`` at
lazy-mlir (``frontends/torch_lazy.py``; ``LAZY_MLIR_TORCH_LAZY_API=0``
leaves them alone), and ``torch.compile(m, backend="lazy_mlir")`` reaches the
same compiler (``frontends/dynamo.py``, registered by an entry point).
It registers ``torch.lazy``, the device's runtime module (random state,
``synchronize``: ``torch.utils.checkpoint`` and ``torch.random.fork_rng``
use it), and lets ``torch.save`` / ``torch.load`` take lazy tensors;
``lm.save`` writes them as CPU tensors, ``lm.serialization.save / load``
one tensor at a time (``lazy/serialization.py``). ``lm.autocast("lazy",
dtype)`` is ``torch.autocast`` for lazy tensors, with eager CPU autocast's
op policy (``lazy/autocast.py``).
"""
from __future__ import annotations

from . import export  # a callable package: lm.export(model, x, path=...), lm.export.load(...)
from . import distributed  # lm.distributed.init(), ddp(model), reduce_gradients(...)
from . import metrics
from .config import PipelineConfig, set_config
from .export import export_train_step
from .frontends import debug, torch_lazy as _torch_lazy
from .frontends.jit import jit
from .frontends.train_step import compile_train_step
from .lazy.autocast import autocast
from .bucketing import bucket_collate, pad_to_bucket
from .lazy.coverage import check_coverage
from .lazy import device_module as _device_module, serialization
from .lazy.device import lazy_device, register as _register
from .lazy.serialization import save_as_cpu as save
from .lazy.sync import mark_step, set_target, wait_device_ops
from .runtime.host_memory import keep_freed_memory_if_default_target_is_host

keep_freed_memory_if_default_target_is_host()  # before any lazy-mlir thread mallocs

_register()
_device_module.register()  # torch.lazy: random state, synchronize (torch.utils.checkpoint)
serialization.register()   # torch.load(f, map_location="lazy")
if _torch_lazy.requested():
    _torch_lazy.install()

__all__ = ["lazy_device", "mark_step", "wait_device_ops", "metrics", "debug", "set_target",
           "jit", "export", "distributed", "check_coverage", "export_train_step",
           "compile_train_step", "PipelineConfig", "set_config", "save", "serialization",
           "autocast", "pad_to_bucket", "bucket_collate"]
__version__ = "0.1.0"
