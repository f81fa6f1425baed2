"""One IREE runtime session per target: device, module loading, transfers."""
from __future__ import annotations

import functools
import threading

import numpy as np
import torch

from ..lazy import metrics
from ..pipeline.targets import Target


class Session:
    """The IREE instance and device of a target; loads and runs modules."""

    def __init__(self, target: Target):
        import iree.runtime as rt
        self.rt = rt
        self.target = target
        self.config = rt.Config(target.driver)
        self.device = self.config.device
        self.lock = threading.Lock()
        _quiet_shutdown()

    def load(self, vmfb: bytes):
        """A callable running the module's ``main``: device arrays in and out."""
        rt = self.rt
        ctx = rt.SystemContext(config=self.config)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
        return ctx.modules.module["main"]

    def to_device(self, host: torch.Tensor):
        arr = host.detach().contiguous().numpy()
        metrics.counter_inc("TransferToDevice", arr.nbytes)
        return self.rt.asdevicearray(self.device, arr)

    def to_host(self, array, spec) -> torch.Tensor:
        arr = np.array(array.to_host(), copy=True)
        metrics.counter_inc("TransferFromDevice", arr.nbytes)
        out = torch.from_numpy(arr)
        if out.dtype != spec.dtype:
            out = out.to(spec.dtype)
        return out.reshape(spec.shape)


def _quiet_shutdown() -> None:
    # Lazy tensors held in user globals keep device arrays alive until the
    # interpreter tears down; nanobind would report each as a "leak".
    import iree.runtime._binding as binding
    binding.disable_leak_checker()


@functools.lru_cache(maxsize=None)
def session_for(target: Target) -> Session:
    return Session(target)
