"""The ``lazy_mlir_attention`` import module: attention in cpu modules run by
PyTorch's CPU flash attention kernels (``host_calls/ops/attention.py``) on IREE's
host buffers.

``host_calls/passes/attention.py`` lowers attention nodes to calls of
``@lazy_mlir_attention.flash[_causal](q, k, v, scale_bits) -> (out, lse)``
and ``.flash_backward[_causal](grad_out, q, k, v, out, lse, scale_bits) ->
(grad_q, grad_k, grad_v)`` (``[B, L, H, D]`` tensors, ``lse`` ``[B, H, L]``);
this module implements them as an ``iree.runtime.PyModuleInterface`` that
``Session.load`` puts in a module's VM context before the module, as
``host_blas`` does (same threads, GIL and synchronous-call notes). Operands
are mapped in place (read-only); results are buffers of the device's
allocator, filled from the kernel's outputs (the kernel has no ``out=``).
Every kernel runs through ``run_kernel``, the one call site.

``LAZY_MLIR_HOST_ATTENTION=0`` turns it off (``host_calls.session_config``, and
``lazy/attention.py`` records nodes that save ``P``); calls are counted as
the ``HostAttentionCall`` metric.
"""
from __future__ import annotations


from ... import metrics
from .one_team import on_team

MODULE = "lazy_mlir_attention"
"""``host_calls.passes.attention.MODULE`` (not imported from there: the MLIR bindings)."""

IMPORT_MARK = MODULE.encode() + b"."


def imports_attention(vmfb: bytes) -> bool:
    return IMPORT_MARK in vmfb


def run_kernel(kernel, *args):
    """Run one of ``ops/attention_host``'s kernels (every call goes through here)."""
    import torch
    with torch.no_grad():
        return kernel(*args)


class _Calls:
    """The module's state in one VM context: the device that allocates results."""

    def __init__(self, iface, device):
        import numpy as np
        import iree.runtime as rt
        import torch

        from ..ops import attention as attention_host
        self.rt, self.np, self.torch, self.kernels = rt, np, torch, attention_host
        self.allocator = device.allocator
        self.memory = rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE
        self.usage = rt.BufferUsage.DEFAULT
        self.f32 = int(rt.HalElementType.FLOAT_32)
        self.dtype = np.dtype(np.float32)

    def _tensor(self, ref):
        view = ref.deref(self.rt.HalBufferView)
        return self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.dtype))

    def _results(self, tensors):
        """Result views of ``tensors``, copied into new buffers of the device."""
        refs = []
        for t in tensors:
            shape = tuple(t.shape)
            buf = self.allocator.allocate_buffer(self.memory, self.usage,
                                                 4 * int(self.np.prod(shape)))
            self.torch.from_numpy(buf.map().asarray(shape, self.dtype)).copy_(t)
            refs.append(self.rt.HalBufferView(buf, list(shape), self.f32).ref)
        metrics.counter_inc("HostAttentionCall")
        return tuple(refs)

    def forward(self, is_causal, refs, bits):
        out = run_kernel(self.kernels.flash, *[self._tensor(r) for r in refs], bits, is_causal)
        return self._results(out)

    def backward(self, is_causal, refs, bits):
        out = run_kernel(self.kernels.flash_backward, *[self._tensor(r) for r in refs], bits,
                         is_causal)
        return self._results(out)


def _forward(is_causal: bool):
    def call(self, q, k, v, bits):
        return self.forward(is_causal, (q, k, v), bits)
    return call


def _backward(is_causal: bool):
    def call(self, grad_out, q, k, v, out, lse, bits):
        return self.backward(is_causal, (grad_out, q, k, v, out, lse), bits)
    return call


def create_module(device):
    """A fresh ``lazy_mlir_attention`` VM module for ``device``'s contexts."""
    import iree.runtime as rt
    iface = rt.PyModuleInterface(MODULE, lambda iface: _Calls(iface, device))
    for suffix, is_causal in (("", False), ("_causal", True)):
        # on_team: the call runs on the waiting thread's OpenMP team (one_team.py)
        iface.export("flash" + suffix, "0rrrI_rr", on_team(_forward(is_causal)))
        iface.export("flash_backward" + suffix, "0rrrrrrI_rrr", on_team(_backward(is_causal)))
    return iface.create()
