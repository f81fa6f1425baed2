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

    def load(self, vmfb: bytes, clobbered: tuple[int, ...] = ()) -> "LoadedModule":
        """The module's ``main``, callable on device arrays."""
        rt = self.rt
        ctx = rt.SystemContext(config=self.config)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
        return LoadedModule(self, ctx.modules.module["main"], clobbered)

    def to_device(self, host: torch.Tensor):
        host = host.detach().contiguous()
        if host.dtype == torch.bfloat16:  # numpy has no bfloat16: go through ml_dtypes
            import ml_dtypes
            arr = host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            arr = host.numpy()
        metrics.counter_inc("TransferToDevice", arr.nbytes)
        return self.rt.asdevicearray(self.device, arr)

    def to_host(self, array, spec) -> torch.Tensor:
        arr = np.array(array.to_host(), copy=True)
        metrics.counter_inc("TransferFromDevice", arr.nbytes)
        if spec.dtype == torch.bfloat16:
            out = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
        else:
            out = torch.from_numpy(arr)
        if out.dtype != spec.dtype:
            out = out.to(spec.dtype)
        return out.reshape(spec.shape)


class LoadedModule:
    """A loaded ``main``. ``clobbered`` lists arguments the module may write
    in place (IREE bufferizes ``iree_linalg_ext.sort`` into its operand even
    when that is a function argument, iree-org/iree#24665): those are copied
    before each call, so device data stays immutable."""

    def __init__(self, session: Session, fn, clobbered: tuple[int, ...]):
        self.session = session
        self.fn = fn
        self.clobbered = clobbered

    def __call__(self, *args):
        if self.clobbered:
            args = list(args)
            for i in self.clobbered:
                args[i] = self.session.rt.asdevicearray(self.session.device,
                                                        np.array(args[i].to_host()))
        out = self.fn(*args)
        return out if isinstance(out, (tuple, list)) else (out,)


def _quiet_shutdown() -> None:
    # Lazy tensors held in user globals keep device arrays alive until the
    # interpreter tears down; nanobind would report each as a "leak".
    import iree.runtime._binding as binding
    binding.disable_leak_checker()


@functools.lru_cache(maxsize=None)
def session_for(target: Target) -> Session:
    return Session(target)
