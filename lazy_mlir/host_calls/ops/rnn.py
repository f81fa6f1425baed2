"""One LSTM layer and direction as PyTorch's own CPU kernel: oneDNN's RNN
(``aten::mkldnn_rnn_layer`` forward, ``aten::mkldnn_rnn_layer_backward``).

Eager ``nn.LSTM`` training on the CPU runs these two kernels for float32
(ATen's ``use_mkldnn``; profiled on the suite's medium LSTM: 90% of eager's
step), and so does inductor (an extern kernel). ``host_calls/passes/rnn.py`` lowers
``lazy_mlir::lstm`` / ``lstm_backward`` to the two ops below for the
in-process cpu session, and ``host_calls/runtime/rnn.py`` runs them from the IREE
module as host calls.

The forward saves oneDNN's workspace for the backward, as eager's autograd
does. The lazy forward node's outputs are fixed when it is recorded, so the
workspace is one more output per layer and direction there: ``lazy/rnn.py``
asks ``workspace_floats`` for its size (a probe run of the kernel, once per
shape) and records it in the node's ``workspace`` argument. It is oneDNN's
workspace itself, its bytes seen as float32 (no copy: ``host_calls/runtime/rnn.py``
hands that very memory to IREE), padded into a copy only where the node's
length (the largest over its layers) exceeds this layer's. The backward
also takes the forward's ``hy`` and ``cy`` (``lazy/rnn.py`` saves them).

``ops/rnn.host_lstm`` / ``host_lstm_backward`` are the whole node in this
form, one kernel call per layer and direction: the IMPORT decompositions of
``host_calls/passes/rnn.py`` and, wherever the node has a workspace and
``enabled()`` holds, its CPU kernels too (a graph run
eagerly while its module compiles then saves what a compiled one does, so
a forward and a backward in different graphs match whichever of the two
ran compiled). The forward's packs (what the loop backward reads) are NaN;
the backward refuses a forward whose packs are not (one element read): a
forward and a backward lowered differently never mix silently.
"""
from __future__ import annotations

import functools

import torch

from ...config import switched_on

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("host_lstm_layer(Tensor x, Tensor h0, Tensor c0, Tensor w_ih, Tensor w_hh, "
            "Tensor b_ih, Tensor b_hh, int workspace, bool reverse) -> "
            "(Tensor, Tensor, Tensor, Tensor)")
_LIB.define("host_lstm_layer_backward(Tensor x, Tensor h0, Tensor c0, Tensor w_ih, "
            "Tensor w_hh, Tensor b_ih, Tensor b_hh, Tensor y, Tensor hy, Tensor cy, "
            "Tensor workspace, Tensor pack, Tensor dy, "
            "Tensor dhy, Tensor dcy, bool reverse) -> (Tensor, Tensor, Tensor, Tensor, "
            "Tensor, Tensor)")

aten = torch.ops.aten
LSTM_MODE = 2  # oneDNN's (ATen's ``rnn_mode``) LSTM


def enabled() -> bool:
    """``LAZY_MLIR_RNN`` is not 0/false/off/no (default on) and this PyTorch
    has oneDNN with it enabled."""
    if not switched_on("LAZY_MLIR_RNN"):
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
    return -(-_workspace_bytes(steps, batch, inputs, hidden) // 4)


def _as_saved(ws: torch.Tensor, floats: int) -> torch.Tensor:
    """oneDNN's workspace (uint8) as ``floats`` float32s: its own memory when
    the lengths agree, else a zero-padded copy."""
    if ws.numel() == 4 * floats and ws.is_contiguous() and ws.data_ptr() % 4 == 0:
        return ws.view(torch.float32)
    saved = ws.new_zeros(4 * floats)
    saved[:ws.numel()] = ws
    return saved.view(torch.float32)


def lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, workspace: int, reverse: bool):
    """``(y, hy, cy, saved)``: one layer and direction, time-major ``x``;
    ``saved``: ``workspace`` float32s over oneDNN's workspace."""
    hidden = h0.shape[-1]
    with torch.enable_grad():
        y, hy, cy, ws = aten.mkldnn_rnn_layer(
            x.contiguous(), w_ih, w_hh, b_ih, b_hh, h0, c0, reverse, [], LSTM_MODE, hidden, 1,
            True, False, False, True)
    return y, hy, cy, _as_saved(ws, workspace)


def lstm_layer_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, hy, cy, saved, pack, dy, dhy,
                        dcy, reverse: bool):
    """``(dx, dh0, dc0, dw_ih, dw_hh, db)`` from ``lstm_layer``'s outputs;
    ``pack``: an element of the forward node's pack for this direction."""
    if not torch.isnan(pack).all():
        raise RuntimeError(
            "lazy-mlir: an LSTM backward lowered as a host call got a forward that was not "
            "(its packs are not NaN): the forward and the backward were compiled with "
            "different settings (LAZY_MLIR_RNN, or the target changed between them)")
    hidden = h0.shape[-1]
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


def _layer_backward_shapes(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, hy, cy, saved, pack, dy,
                           dhy, dcy, reverse):
    return (x.new_empty(x.shape), h0.new_empty(h0.shape), c0.new_empty(c0.shape),
            w_ih.new_empty(w_ih.shape), w_hh.new_empty(w_hh.shape),
            w_ih.new_empty((w_ih.shape[0],)))


_LIB.impl("host_lstm_layer", lstm_layer, "CompositeExplicitAutograd")
_LIB.impl("host_lstm_layer_backward", lstm_layer_backward, "CompositeExplicitAutograd")
torch.library.register_fake("lazy_mlir::host_lstm_layer", _layer_shapes, lib=_LIB)
torch.library.register_fake("lazy_mlir::host_lstm_layer_backward", _layer_backward_shapes,
                            lib=_LIB)
