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
    """The module's state in one VM context: the device that imports results."""

    def __init__(self, iface, device):
        import numpy as np
        import iree.runtime as rt
        import torch

        from ..ops import rnn_host
        self.rt, self.np, self.torch, self.kernels = rt, np, torch, rnn_host
        self.device = device
        self.dtype = np.dtype(np.float32)

    def _tensor(self, ref):
        view = ref.deref(self.rt.HalBufferView)
        return self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.dtype))

    def _results(self, tensors, operands, workspace=None):
        """Result views over the kernel's own outputs, not copies: IREE imports
        each one's memory through DLPack (a numpy view's capsule, released when
        IREE drops the buffer, which keeps the tensor alive till then). An
        output sharing memory with an operand is copied first, as IREE takes
        results for its own. ``workspace``: the output to note in
        ``rnn_host._LIVE`` for as long as IREE holds it."""
        spans = [(t.data_ptr(), t.data_ptr() + t.nbytes) for t in operands]
        refs = []
        for t in tensors:
            t = t.contiguous()
            low, high = t.data_ptr(), t.data_ptr() + t.nbytes
            if any(low < end and start < high for start, end in spans):
                t = t.clone()
            array = t.numpy()
            if t is workspace:
                self.kernels.track(t, array)
            refs.append(self.device.from_dlpack_capsule(array.__dlpack__()).ref)
        metrics.counter_inc("HostRnnCall")
        return tuple(refs)

    def forward(self, reverse, refs, workspace):
        operands = [self._tensor(r) for r in refs]
        with self.torch.no_grad():
            out = self.kernels.run_layer(*operands, int(workspace), reverse)
        return self._results(out, operands, workspace=out[3])

    def backward(self, reverse, refs):
        operands = [self._tensor(r) for r in refs]
        with self.torch.no_grad():
            out = self.kernels.lstm_layer_backward(*operands, reverse)
        return self._results(out, operands)


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
        iface.export("lstm_layer" + suffix, "0rrrrrrrI_rrrr", _forward(reverse))
        iface.export("lstm_layer_backward" + suffix, "0" + "r" * 14 + "_" + "r" * 6,
                     _backward(reverse))
    return iface.create()
