"""LSTM layers as calls into PyTorch's oneDNN LSTM kernels (the in-process cpu
session only): eager's own kernels, run from the IREE module.

``ops/rnn.py`` lowers ``lazy_mlir::lstm`` / ``lstm_backward`` to ``scan``
loops: on the suite's medium LSTM (hidden 512, 4 layers, 128 steps) IREE
runs those as 1,024 inner and 64 outer host-driven iterations a step, each
copying its loop carries into new buffers (~2 GB a step), and the step took
2.5x eager's time, where eager runs one oneDNN RNN primitive per layer
(``aten::mkldnn_rnn_layer`` forward, ``mkldnn_rnn_layer_backward``: ~90% of
eager's step). Inductor calls the same kernel (an extern kernel).

Where ``PipelineConfig.rnn_as_calls(target)`` holds, ``decompositions()``
replaces the two ops' IMPORT decompositions by ``ops/rnn``'s host forms:
each layer and direction becomes one ``lazy_mlir::host_lstm_layer`` forward
and one ``host_lstm_layer_backward``, which torch-mlir imports as
``torch.operator``s; ``calls_instead`` turns those into calls of external
functions ``@lazy_mlir_rnn.*`` on dynamically shaped tensors, which
iree-compile makes imports of the module and ``host_calls/runtime/rnn.py``
implements. Only nodes recorded with room for oneDNN's workspace
(``workspace`` > 0, ``lazy/rnn.py``: looped, no projections, cpu) are taken;
the others keep their loops.

torch-mlir's linalg backend contract has no external calls on tensors
(``torch-verify-linalg-on-tensors-backend-contract`` refuses a
``func.call``), so a module with them runs the linalg pipeline without that
last check (``torch_calls.without_contract_check``), and
``torch_calls.contract_violation`` makes sure no torch op
or type was left.
"""
from __future__ import annotations

import torch

from ...dialects import torch_calls as T
from ...ops import rnn as R
from ..ops import rnn as rnn_host  # noqa: F401  (defines torch.ops.lazy_mlir.host_lstm_layer*)

MODULE = "lazy_mlir_rnn"
"""The name of the import module (``host_calls/runtime/rnn.py`` registers it)."""

CALL_MARK = f"call @{MODULE}."
"""How a call reads in the printed module."""

_OPERATORS = {"torch.lazy_mlir.host_lstm_layer": "lstm_layer",
              "torch.lazy_mlir.host_lstm_layer_backward": "lstm_layer_backward"}
ops = torch.ops.lazy_mlir


def decompositions() -> dict:
    """The IMPORT decompositions that win over ``ops/rnn.py``'s where the
    host calls are on (``NotImplemented``, hence the loops, for nodes
    without a workspace)."""
    return {ops.lstm.default: R.host_lstm, ops.lstm_backward.default: R.host_lstm_backward}


# ------------------------------------------------------------ torch dialect
def _callee(operator: str, reverse: bool) -> str | None:
    kind = _OPERATORS.get(operator)
    return None if kind is None else f"{MODULE}.{kind}{'_reverse' if reverse else ''}"


def calls_instead(module) -> int:
    """Replace every ``host_lstm_layer*`` ``torch.operator`` of the imported
    torch-dialect ``module`` by a call of ``@lazy_mlir_rnn.<fn>[_reverse]``
    (tensors cast to dynamic shapes and back, the workspace length an
    integer operand), in place; returns how many."""
    return T.operators_as_calls(module, _callee)
