"""One LSTM layer and direction as PyTorch's own CPU kernel: oneDNN's RNN
(``aten::mkldnn_rnn_layer`` forward, ``aten::mkldnn_rnn_layer_backward``).

Eager ``nn.LSTM`` training on the CPU runs these two kernels for float32
(ATen's ``use_mkldnn``; profiled on the suite's medium LSTM: 90% of eager's
step), and so does inductor (an extern kernel). ``passes/host_rnn.py`` lowers
``lazy_mlir::lstm`` / ``lstm_backward`` to the two ops below for the
in-process cpu session, and ``runtime/host_rnn.py`` runs them from the IREE
module as host calls.

The forward saves oneDNN's workspace for the backward, as eager's autograd
does. The lazy forward node's outputs are fixed when it is recorded, so the
workspace is one more output per layer and direction there: ``lazy/rnn.py``
asks ``workspace_floats`` for its size (a probe run of the kernel, once per
shape) and records it in the node's ``workspace`` argument. Laid out as
float32: ``[oneDNN's workspace bytes | hy | cy | tag]``; ``tag`` is
``HOST_TAG`` when the host forward wrote it (the scan lowering leaves zeros,
and the host backward refuses those: a forward and a backward lowered
differently never mix silently).
"""
from __future__ import annotations

import functools
import os

import torch

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("host_lstm_layer(Tensor x, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, "
            "Tensor b_ih, Tensor b_hh, int workspace, bool reverse) -> "
            "(Tensor, Tensor, Tensor, Tensor)")
_LIB.define("host_lstm_layer_backward(Tensor x, Tensor h0, Tensor c0, Tensor w_ih, "
            "Tensor w_hh, Tensor b_ih, Tensor b_hh, Tensor y, Tensor workspace, Tensor dy, "
            "Tensor dhy, Tensor dcy, bool reverse) -> (Tensor, Tensor, Tensor, Tensor, "
            "Tensor, Tensor)")

aten = torch.ops.aten
LSTM_MODE = 2  # oneDNN's (ATen's ``rnn_mode``) LSTM
HOST_TAG = 1.0


def enabled() -> bool:
    """``LAZY_MLIR_RNN`` is not 0/false/off/no (default on) and this PyTorch
    has oneDNN with it enabled."""
    if os.environ.get("LAZY_MLIR_RNN", "1").strip().lower() in ("0", "false", "off", "no"):
        return False
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


@functools.lru_cache(maxsize=64)
def _workspace_bytes(steps: int, batch: int, inputs: int, hidden: int) -> int:
    x = torch.zeros(steps, batch, inputs)
    h = torch.zeros(batch, hidden)
    with torch.no_grad(), torch.enable_grad():  # (ATen returns no workspace under no_grad)
        out = aten.mkldnn_rnn_layer(x, torch.zeros(4 * hidden, inputs),
                                    torch.zeros(4 * hidden, hidden), torch.zeros(4 * hidden),
                                    torch.zeros(4 * hidden), h, h, False, [], LSTM_MODE,
                                    hidden, 1, True, False, False, True)
    return out[3].numel() * out[3].element_size()


def workspace_floats(steps: int, batch: int, inputs: int, hidden: int) -> int:
    """The float32 length of one layer and direction's saved workspace."""
    return -(-_workspace_bytes(steps, batch, inputs, hidden) // 4) + 2 * batch * hidden + 1


def lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, workspace: int, reverse: bool, out=None):
    """``(y, hy, cy, saved)``: one layer and direction, time-major ``x``;
    ``saved`` written into ``out`` when given (``workspace`` float32s: the
    host call's result buffer, not filled beyond what is read)."""
    hidden = h0.shape[-1]
    with torch.enable_grad():
        y, hy, cy, ws = aten.mkldnn_rnn_layer(
            x.contiguous(), w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, [], LSTM_MODE, hidden, 1,
            True, False, False, True)
    saved = x.new_empty(workspace) if out is None else out
    raw = saved.view(torch.uint8)
    raw[:ws.numel()] = ws
    tail = saved[-(2 * hy.numel() + 1):]
    tail[:hy.numel()] = hy.reshape(-1)
    tail[hy.numel():-1] = cy.reshape(-1)
    tail[-1] = HOST_TAG
    return y, hy, cy, saved


def lstm_layer_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, saved, dy, dhy, dcy,
                        reverse: bool):
    """``(dx, dh0, dc0, dw_ih, dw_hh, db)`` from ``lstm_layer``'s ``saved``."""
    if float(saved[-1]) != HOST_TAG:
        raise RuntimeError(
            "lazy-mlir: an LSTM backward lowered as a host call got a forward that was not "
            "(its workspace is empty): the forward and the backward were compiled with "
            "different settings (LAZY_MLIR_RNN, or the target changed between them)")
    hidden, states = h0.shape[-1], h0.numel()
    tail = saved[-(2 * states + 1):]
    hy, cy = tail[:states].view(h0.shape), tail[states:-1].view(c0.shape)
    ws = saved.view(torch.uint8)[:_workspace_bytes(x.shape[0], x.shape[1], x.shape[2],
                                                   hidden)]
    dx, dw_ih, dw_hh, db, _, dh0, dc0 = aten.mkldnn_rnn_layer_backward(
        x.contiguous(), w_ih, w_hh, b_ih, b_hh, h0, c0, y.contiguous(), hy, cy,
        dy.contiguous(), dhy, dcy, reverse, LSTM_MODE, hidden, 1, True, True, False, [], False,
        ws)
    return dx, dh0, dc0, dw_ih, dw_hh, db


def _layer_shapes(x, h0, c0, w_ih, w_hh, b_ih, b_hh, workspace, reverse):
    return (x.new_empty((*x.shape[:2], h0.shape[-1])), h0.new_empty(h0.shape),
            c0.new_empty(c0.shape), x.new_empty((workspace,)))


def _layer_backward_shapes(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, saved, dy, dhy, dcy,
                           reverse):
    return (x.new_empty(x.shape), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
            w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape),
            w_ih.new_empty((w_ih.shape[0],)))


_LIB.impl("host_lstm_layer", lstm_layer, "CompositeExplicitAutograd")
_LIB.impl("host_lstm_layer_backward", lstm_layer_backward, "CompositeExplicitAutograd")
torch.library.register_fake("lazy_mlir::host_lstm_layer", _layer_shapes, lib=_LIB)
torch.library.register_fake("lazy_mlir::host_lstm_layer_backward", _layer_backward_shapes,
                            lib=_LIB)
