"""The ``lazy_mlir_blas`` import module: large f32 matmuls of cpu modules run by
PyTorch's ``torch.mm`` / ``torch.bmm`` (MKL/oneDNN) on IREE's host buffers.

``host_calls/passes/blas.py`` rewrites the matmuls into calls of
``@lazy_mlir_blas.matmul(a, b, transpose_a, transpose_b)`` (and
``.batch_matmul``); this module implements them as an
``iree.runtime.PyModuleInterface`` that ``Session.load`` puts in a module's VM
context, before the module, when the module imports it. The call is
synchronous (IREE waits for ``a`` and ``b``, and takes the result as ready):
the operands are mapped in place (local-task and local-sync buffers are host
memory), the result is a buffer of the device's allocator written in place by
``torch.mm(..., out=)``. A result in memory torch allocated, imported with
``import_host_allocation``, read garbage once the tensor was freed: the import
does not keep it alive.

Threads: the call runs on the thread that invoked the module while IREE's
workers wait, with torch's intra-op threads (``torch.get_num_threads()``);
when that is lazy-mlir's run thread (one OpenMP thread), on the thread that
waits for the job if one does (``one_team.on_team``). It takes the GIL to
run, so while the main thread records the next step the call may wait for
it (Python hands the GIL over after ``sys.getswitchinterval()``, 5 ms).

``LAZY_MLIR_BLAS`` (1, 0, or auto: on where PyTorch's GEMM is MKL on an Intel
CPU, ``host_gemm``) switches the rewrite (``host_calls.session_config``); calls
are counted as the ``HostBlasCall`` metric.
"""
from __future__ import annotations

from ... import metrics
from .. import gemm as host_gemm
from . import bf16_gemm
from .one_team import on_team

MODULE = "lazy_mlir_blas"
"""``host_calls.passes.blas.MODULE``, not imported from there: that module imports
the MLIR bindings, which running a module does not need."""

IMPORT_MARK = MODULE.encode() + b"."
"""A vmfb whose bytes hold this imports the module (its import table names
``lazy_mlir_blas.matmul``)."""


def enabled() -> bool:
    """``LAZY_MLIR_BLAS``: 1, 0 or auto (the default: on where PyTorch's
    GEMM is MKL on an Intel CPU, ``host_gemm``)."""
    return host_gemm.switch("LAZY_MLIR_BLAS")


def in_process_cpu(target) -> bool:
    """``target`` runs on the cpu driver in this process (host memory): the
    only sessions a module may call PyTorch from (``host_rnn`` asks too)."""
    return target.name == "cpu" and target.driver in ("local-task", "local-sync")


def imports_blas(vmfb: bytes) -> bool:
    return IMPORT_MARK in vmfb


class _Calls:
    """The module's state in one VM context: the device that allocates results."""

    def __init__(self, iface, device):
        import numpy as np
        import iree.runtime as rt
        import torch
        self.rt, self.np, self.torch = rt, np, torch
        self.allocator = device.allocator
        self.memory = rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE
        self.usage = rt.BufferUsage.DEFAULT
        self.f32 = int(rt.HalElementType.FLOAT_32)
        self.dtype = np.dtype(np.float32)
        self.bits = np.dtype(np.uint16)  # a bf16 element

    def _tensor(self, ref, transposed: int, bf16: bool = False):
        view = ref.deref(self.rt.HalBufferView)
        if bf16:  # (numpy has no bfloat16: the bits as uint16)
            t = self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.bits))
            t = t.view(self.torch.bfloat16)
        else:
            t = self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.dtype))
        return t.transpose(-1, -2) if transposed else t

    def _result(self, shape: tuple[int, ...]):
        buf = self.allocator.allocate_buffer(self.memory, self.usage,
                                             4 * int(self.np.prod(shape)))
        return buf, self.torch.from_numpy(buf.map().asarray(shape, self.dtype))

    def _call(self, a_ref, b_ref, transpose_a, transpose_b, compute, bf16=False):
        """``compute(a, b, out)`` on the operands, into a new float32 result."""
        a = self._tensor(a_ref, transpose_a, bf16)
        b = self._tensor(b_ref, transpose_b, bf16)
        shape = (*a.shape[:-1], b.shape[-1])
        buf, out = self._result(shape)
        compute(a, b, out)
        metrics.counter_inc("HostBlasCall")
        return self.rt.HalBufferView(buf, list(shape), self.f32).ref

    def matmul(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b,
                          lambda a, b, out: self.torch.mm(a, b, out=out))

    def batch_matmul(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b,
                          lambda a, b, out: self.torch.bmm(a, b, out=out))

    def matmul_bf16(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b, bf16_gemm.exact, bf16=True)

    def batch_matmul_bf16(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b, bf16_gemm.exact, bf16=True)

    def matmul_bf16_rounded(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b, bf16_gemm.rounded, bf16=True)

    def batch_matmul_bf16_rounded(self, a_ref, b_ref, transpose_a: int, transpose_b: int):
        return self._call(a_ref, b_ref, transpose_a, transpose_b, bf16_gemm.rounded, bf16=True)


_CALLS = ("matmul", "batch_matmul", "matmul_bf16", "batch_matmul_bf16",
          "matmul_bf16_rounded", "batch_matmul_bf16_rounded")


def create_module(device):
    """A fresh ``lazy_mlir_blas`` VM module for ``device``'s contexts."""
    import iree.runtime as rt
    iface = rt.PyModuleInterface(MODULE, lambda iface: _Calls(iface, device))
    for name in _CALLS:
        iface.export(name, "0rrii_r", on_team(getattr(_Calls, name)))
    return iface.create()
