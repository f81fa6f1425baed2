"""``nn.LSTM`` and ``nn.GRU`` on lazy tensors: one node forward, one backward.

``aten::lstm.input`` and ``aten::gru.input`` are CompositeImplicitAutograd:
left alone, PyTorch runs them as each time step's ops (a linear, a chunk,
four activations, ...) and autograd records each step's backward, so a
2-layer LSTM over 32 steps costs ~3,200 recorded ops a training step. A
kernel registered for the ``AutogradLazy`` dispatch key takes precedence
over that decomposition for lazy tensors (torch_xla registers its
``AutogradXLA`` kernels the same way, ``aten_autograd_ops.cpp``); it runs an
autograd function whose forward records ``lazy_mlir::lstm`` and whose
backward records ``lazy_mlir::lstm_backward`` (``ops/rnn.py``: what they
compute and how they become aten ops before import). The backward reads the
gate activations the forward node saved, so nothing is computed twice.

Everything else takes PyTorch's decomposition, as before (correct, one node
per step's op), decided per call:

- dropout between layers in training (``dropout > 0``, ``train``, more than
  one layer): eager draws its masks from the CPU generator inside the
  composite; the old path keeps what capture does for dropout;
- dtypes other than float32, an input that is not 3-d, tensors that are not
  all lazy, the ops denied by a failed compile, or decompositions switched
  off (``PipelineConfig.decompositions``);
- packed sequences (``lstm.data``/``gru.data``: per-step batch sizes) never
  reach here.

Without gradients (``torch.no_grad``, ``torch.inference_mode``, nothing
requiring grad) the forward node is recorded alone, with room for oneDNN's
workspace as in training (``_workspace``), so that on the cpu target it runs
as oneDNN's calls too: as loops, an evaluation graph of several batches
chains two loops per layer per batch, IREE's whole-module analyses of a
module with that many loops and a host call stop converging ("failed to
solve for timepoint coverage": PyTorch's word-language-model example's
evaluation ran eagerly), and each loop is IREE's slow host-driven scan.

Double backward (``create_graph=True`` through the LSTM) raises PyTorch's
``once_differentiable`` error rather than giving a wrong second derivative.
Each fused call counts ``lazy::lstm`` / ``lazy::gru`` (by ``record``), each
call sent down the old path ``rnn_unfused::<why>``.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..ops import rnn as _rnn_ops  # noqa: F401  (defines torch.ops.lazy_mlir.lstm, ...)
from ..host_calls.ops import rnn as _rnn_host
from . import fused

aten = torch.ops.aten
ops = torch.ops.lazy_mlir


def _unfused_reason(name, input, tensors, dropout, train, num_layers) -> str | None:
    """Why this call takes PyTorch's decomposition, or None."""
    if not fused.all_lazy(tensors):
        return "not all lazy"
    if input.dim() != 3:
        return "input not 3-d"
    if any(t.dtype != torch.float32 for t in tensors):
        return "not float32"
    if dropout > 0 and train and num_layers > 1:
        return "dropout"
    return fused.compile_reason(getattr(ops, name).default,
                                getattr(ops, name + "_backward").default)


def _needs_grad(tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


class _LSTM(torch.autograd.Function):
    @staticmethod
    def _compiled_autograd_key(ctx):
        """Compiled autograd (``lazy/backward.py``) caches a backward by this key
        and the one-node backward bakes ``ctx.config`` into it: two layers
        with equal shapes but another layout (batch first or not, ...) must
        not share one. (Integers only.)"""
        return (ctx._autograd_function_id, *(int(c) for c in ctx.config))

    @staticmethod
    def forward(ctx, config, input, hx, cx, *params):
        out, hy, cy, *saved = ops.lstm.default(input, hx, cx, list(params), *config)
        if config[-1]:  # (a workspace: the host backward also reads the final states)
            saved += [hy, cy]
        ctx.config, ctx.n_params = config, len(params)
        ctx.save_for_backward(input, hx, cx, *params, *saved)
        ctx.set_materialize_grads(False)
        return out, hy, cy

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_hy, d_cy):
        need = ctx.needs_input_grad[1:]
        if d_out is None and d_hy is None and d_cy is None:
            return (None,) * (1 + len(need))
        input, hx, cx, *rest = ctx.saved_tensors
        params, saved = rest[:ctx.n_params], rest[ctx.n_params:]
        grads = ops.lstm_backward.default(d_out, d_hy, d_cy, input, hx, cx, params, saved,
                                          *ctx.config)
        return (None, *[g if n else None for g, n in zip(grads, need)])


class _GRU(torch.autograd.Function):
    _compiled_autograd_key = staticmethod(_LSTM._compiled_autograd_key)

    @staticmethod
    def forward(ctx, config, input, hx, *params):
        out, hy, *saved = ops.gru.default(input, hx, list(params), *config)
        ctx.config, ctx.n_params = config, len(params)
        ctx.save_for_backward(input, hx, *params, *saved)
        ctx.set_materialize_grads(False)
        return out, hy

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out, d_hy):
        need = ctx.needs_input_grad[1:]
        if d_out is None and d_hy is None:
            return (None,) * (1 + len(need))
        input, hx, *rest = ctx.saved_tensors
        params, saved = rest[:ctx.n_params], rest[ctx.n_params:]
        grads = ops.gru_backward.default(d_out, d_hy, input, hx, params, saved, *ctx.config)
        return (None, *[g if n else None for g, n in zip(grads, need)])


def _config(input, has_biases, num_layers, bidirectional, batch_first) -> tuple:
    """The ops' trailing arguments: the layout and whether the recurrence is
    unrolled over time or a loop (``ops/rnn.unrolled``: by its length)."""
    steps = input.shape[1] if batch_first else input.shape[0]
    unroll = _rnn_ops.unrolled(steps, num_layers, 1 + bidirectional)
    return (has_biases, num_layers, bidirectional, batch_first, unroll)


def _workspace(input, hx, cx, config: tuple) -> int:
    """The ``workspace`` argument of ``lazy_mlir::lstm``: room for oneDNN's
    workspace (``host_calls/ops/rnn.py``) when the node may be lowered to host calls
    of PyTorch's oneDNN LSTM: a looped recurrence without projections,
    recorded for the cpu target, ``LAZY_MLIR_RNN`` not off; else 0. Decided
    here because it shapes the node's outputs; whether the host calls are
    made is decided when the graph is compiled (``PipelineConfig.host_rnn``).
    """
    _, num_layers, bidirectional, batch_first, unroll = config
    if unroll or hx.shape[-1] != cx.shape[-1] or not _rnn_host.enabled():
        return 0
    from .sync import current_target
    if current_target().name != "cpu":
        return 0
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    hidden = cx.shape[-1]
    widths = {input.shape[-1]} | ({hidden * (1 + bidirectional)} if num_layers > 1 else set())
    return max(_rnn_host.workspace_floats(steps, batch, w, hidden) for w in widths)


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
         batch_first):
    """The ``AutogradLazy`` kernel of ``aten::lstm.input``."""
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
            batch_first)
    tensors = [input, *hx, *params]
    why = "hx not (h0, c0)" if len(hx) != 2 else _unfused_reason(
        "lstm", input, tensors, dropout, train, num_layers)
    if why is not None:
        return fused.composite("rnn", why, aten.lstm.input, *args)
    config = _config(input, has_biases, num_layers, bidirectional, batch_first)
    config += (_workspace(input, hx[0], hx[1], config),)
    if not _needs_grad(tensors):  # (a workspace all the same: oneDNN's calls, not loops)
        return tuple(ops.lstm.default(input, hx[0], hx[1], list(params), *config)[:3])
    return _LSTM.apply(config, input, hx[0], hx[1], *params)


def gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """The ``AutogradLazy`` kernel of ``aten::gru.input``."""
    args = (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
            batch_first)
    tensors = [input, hx, *params]
    why = _unfused_reason("gru", input, tensors, dropout, train, num_layers)
    if why is not None:
        return fused.composite("rnn", why, aten.gru.input, *args)
    config = _config(input, has_biases, num_layers, bidirectional, batch_first)
    if not _needs_grad(tensors):
        return tuple(ops.gru.default(input, hx, list(params), *config)[:2])
    return _GRU.apply(config, input, hx, *params)


def register(lib: torch.library.Library) -> None:
    """Install the kernels on ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("lstm.input", lstm, "AutogradLazy")
    lib.impl("gru.input", gru, "AutogradLazy")
