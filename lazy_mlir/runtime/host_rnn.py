"""The ``lazy_mlir_rnn`` import module: LSTM layers of cpu modules run by
PyTorch's oneDNN LSTM kernels (``ops/rnn_host.py``) on IREE's host buffers.

``passes/host_rnn.py`` lowers each LSTM layer and direction to calls of
``@lazy_mlir_rnn.lstm_layer[_reverse](x, h0, c0, w_ih, w_hh, b_ih, b_hh,
workspace)`` and ``.lstm_layer_backward[_reverse](x, h0, c0, w_ih, w_hh,
b_ih, b_hh, y, saved, dy, dhy, dcy)``; this module implements them as an
``iree.runtime.PyModuleInterface`` that ``Session.load`` puts in a module's
VM context before the module, as ``host_blas`` does (same threads, GIL and
synchronous-call notes). Operands are mapped in place (read-only); results
are buffers of the device's allocator, filled from the kernel's outputs.

``LAZY_MLIR_RNN=0`` turns it off (``session_config``, and ``lazy/rnn.py``
records no workspace); calls are counted as the ``HostRnnCall`` metric.
"""
from __future__ import annotations

import functools

from .. import metrics
from ..config import PipelineConfig
from .host_blas import in_process_cpu
from .one_team import on_team

MODULE = "lazy_mlir_rnn"
"""``passes.host_rnn.MODULE`` (not imported from there: the MLIR bindings)."""

IMPORT_MARK = MODULE.encode() + b"."


def session_config(target, config: PipelineConfig) -> PipelineConfig:
    """``config`` for compiling a module that THIS process runs on ``target``:
    ``host_rnn`` on for the cpu target (host memory) unless ``LAZY_MLIR_RNN=0``
    or PyTorch has no oneDNN. Only in-process sessions ask (mark_step,
    ``compile_train_step``); export and ``lm.jit`` compile with the config as
    given, so their modules never import PyTorch."""
    if not in_process_cpu(target):
        return config
    from ..ops.rnn_host import enabled
    return _with_host_rnn(config, enabled())


@functools.lru_cache(maxsize=16)
def _with_host_rnn(config: PipelineConfig, want: bool) -> PipelineConfig:
    return config if config.host_rnn == want else config.replace(host_rnn=want)


def imports_rnn(vmfb: bytes) -> bool:
    return IMPORT_MARK in vmfb


class _Calls:
    """The module's state in one VM context: the device that allocates results."""

    def __init__(self, iface, device):
        import numpy as np
        import iree.runtime as rt
        import torch

        from ..ops import rnn_host
        self.rt, self.np, self.torch, self.kernels = rt, np, torch, rnn_host
        self.allocator = device.allocator
        self.memory = rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE
        self.usage = rt.BufferUsage.DEFAULT
        self.f32 = int(rt.HalElementType.FLOAT_32)
        self.dtype = np.dtype(np.float32)

    def _tensor(self, ref):
        view = ref.deref(self.rt.HalBufferView)
        return self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.dtype))

    def _buffer(self, shape):
        """(a result buffer of the device's allocator, a tensor over its memory)."""
        buf = self.allocator.allocate_buffer(self.memory, self.usage,
                                             4 * int(self.np.prod(shape)))
        return buf, self.torch.from_numpy(buf.map().asarray(tuple(shape), self.dtype))

    def _results(self, tensors, written=()):
        """Result views of ``tensors``, copied into new buffers but for the
        ``written`` (buffer, tensor) pairs, which are returned as they are."""
        written = {id(t): buf for buf, t in written}
        refs = []
        for t in tensors:
            buf = written.get(id(t))
            if buf is None:
                buf, out = self._buffer(t.shape)
                out.copy_(t)
            refs.append(self.rt.HalBufferView(buf, list(t.shape), self.f32).ref)
        metrics.counter_inc("HostRnnCall")
        return tuple(refs)

    def forward(self, reverse, refs, workspace):
        buf, saved = self._buffer((int(workspace),))  # oneDNN's workspace: copied once
        with self.torch.no_grad():
            out = self.kernels.lstm_layer(*[self._tensor(r) for r in refs], int(workspace),
                                          reverse, out=saved)
        return self._results(out, [(buf, saved)])

    def backward(self, reverse, refs):
        with self.torch.no_grad():
            out = self.kernels.lstm_layer_backward(*[self._tensor(r) for r in refs], reverse)
        return self._results(out)


def _forward(reverse: bool):
    def call(self, x, h0, c0, w_ih, w_hh, b_ih, b_hh, workspace):
        return self.forward(reverse, (x, h0, c0, w_ih, w_hh, b_ih, b_hh), workspace)
    return call


def _backward(reverse: bool):
    def call(self, *refs):
        return self.backward(reverse, refs)
    return call


def create_module(device):
    """A fresh ``lazy_mlir_rnn`` VM module for ``device``'s contexts."""
    import iree.runtime as rt
    iface = rt.PyModuleInterface(MODULE, lambda iface: _Calls(iface, device))
    for suffix, reverse in (("", False), ("_reverse", True)):
        iface.export("lstm_layer" + suffix, "0rrrrrrrI_rrrr", on_team(_forward(reverse)))
        iface.export("lstm_layer_backward" + suffix, "0" + "r" * 12 + "_" + "r" * 6,
                     on_team(_backward(reverse)))
    return iface.create()
