"""The ``lazy_mlir_rnn`` import module: LSTM layers of cpu modules run by
PyTorch's oneDNN LSTM kernels (``host_calls/ops/rnn.py``) on IREE's host buffers.

``host_calls/passes/rnn.py`` lowers each LSTM layer and direction to calls of
``@lazy_mlir_rnn.lstm_layer[_reverse](x, h0, c0, w_ih, w_hh, b_ih, b_hh,
workspace)`` and ``.lstm_layer_backward[_reverse](x, h0, c0, w_ih, w_hh,
b_ih, b_hh, y, hy, cy, saved, pack, dy, dhy, dcy)``; this module implements
them as an ``iree.runtime.PyModuleInterface`` that ``Session.load`` puts in
a module's VM context before the module, as ``host_blas`` does (same
threads, GIL and synchronous-call notes). Operands are mapped in place
(read-only). Results are the kernel's own output tensors, imported through
DLPack and kept alive by IREE's buffers: nothing is copied, not even
oneDNN's workspace (32 MB a layer at the suite's medium size), which lives
exactly as long as IREE holds it (in the step's graph, or as an output
when a sync separates forward and backward). The last reference may drop
on one of IREE's threads: the capsule's deleter then takes the GIL.

``LAZY_MLIR_RNN=0`` turns it off (``host_calls.session_config``, and ``lazy/rnn.py``
records no workspace); calls are counted as the ``HostRnnCall`` metric.
"""
from __future__ import annotations

import weakref

from ... import metrics
from .one_team import on_team

MODULE = "lazy_mlir_rnn"
"""``host_calls.passes.rnn.MODULE`` (not imported from there: the MLIR bindings)."""

IMPORT_MARK = MODULE.encode() + b"."


def imports_rnn(vmfb: bytes) -> bool:
    return IMPORT_MARK in vmfb


class _Calls:
    """The module's state in one VM context: the device that imports results."""

    def __init__(self, iface, device):
        import numpy as np
        import iree.runtime as rt
        import torch

        from ..ops import rnn as rnn_host
        self.rt, self.np, self.torch, self.kernels = rt, np, torch, rnn_host
        self.device = device
        self.dtype = np.dtype(np.float32)

    def _tensor(self, ref):
        view = ref.deref(self.rt.HalBufferView)
        return self.torch.from_numpy(view.map().asarray(tuple(view.shape), self.dtype))

    def _results(self, tensors, operands):
        """Result views over the kernel's own outputs, not copies: IREE imports
        each one's memory through DLPack (a numpy view's capsule, released when
        IREE drops the buffer, which keeps the tensor alive till then). An
        output sharing memory with an operand is copied first, as IREE takes
        results for its own."""
        spans = [(t.data_ptr(), t.data_ptr() + t.nbytes) for t in operands]
        arrays = []
        for t in tensors:
            t = t.contiguous()
            low, high = t.data_ptr(), t.data_ptr() + t.nbytes
            if any(low < end and start < high for start, end in spans):
                t = t.clone()
            arrays.append(t.numpy())
        metrics.counter_inc("HostRnnCall")
        return arrays

    def _refs(self, arrays):
        imported = self.device.from_dlpack_capsule
        return tuple(imported(a.__dlpack__()).ref for a in arrays)

    def forward(self, reverse, refs, workspace):
        operands = [self._tensor(r) for r in refs]
        with self.torch.no_grad():
            out = self.kernels.lstm_layer(*operands, int(workspace), reverse)
        arrays = self._results(out, operands)
        _LIVE_WORKSPACES[0] += 1
        weakref.finalize(arrays[3], _workspace_freed)
        return self._refs(arrays)

    def backward(self, reverse, refs):
        operands = [self._tensor(r) for r in refs]
        with self.torch.no_grad():
            out = self.kernels.lstm_layer_backward(*operands, reverse)
        return self._refs(self._results(out, operands))


_LIVE_WORKSPACES = [0]
"""How many workspaces host forwards handed to IREE are still alive (tests:
none outlives the step, or the graph, that holds it)."""


def _workspace_freed() -> None:
    _LIVE_WORKSPACES[0] -= 1


def live_workspaces() -> int:
    return _LIVE_WORKSPACES[0]


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
        iface.export("lstm_layer_backward" + suffix, "0" + "r" * 15 + "_" + "r" * 6,
                     on_team(_backward(reverse)))
    return iface.create()
