"""``F.scaled_dot_product_attention`` on lazy tensors: one node forward, one backward.

``aten::scaled_dot_product_attention`` is CompositeImplicitAutograd: left
alone, the lazy device (no fused kernel) gets PyTorch's math decomposition,
a causal mask built as a tensor, ``_safe_softmax`` and each op's backward. A
kernel for the ``AutogradLazy`` key takes precedence over the composite
for lazy tensors (as ``lazy/rnn.py`` does for ``nn.LSTM``); it runs an
autograd function whose forward records ``lazy_mlir::attention`` and whose
backward records ``lazy_mlir::attention_backward`` (``ops/attention.py``:
what they compute and how they become aten ops before import).

PyTorch's path is kept, decided per call (counted ``attention_unfused::<why>``):
a ``dropout_p`` outside ``[0, 1)``, ``enable_gqa`` with query heads that are
not a multiple of the key/value heads (PyTorch's path raises its error),
tensors that are not all lazy or not all float32, query/key/value of different ranks or batch shapes, a mask that
requires grad, a config without decompositions, the ops denied by a failed
compile, or ``LAZY_MLIR_FUSED_ATTENTION=0``. Each fused call counts
``lazy::attention``. Attention dropout (``dropout_p`` in ``(0, 1)``, as
``transformers`` passes in training) draws its keep mask as any dropout on
the lazy device does (its own stream, ``F.dropout`` of ones: scaled by
``1 / (1 - p)``) and gives it to the node, which drops ``P`` before its
matmul as eager's math path does. Grouped-query attention (``enable_gqa``, which
``transformers`` passes for Llama, Qwen, Mistral and most decoders since
torch 2.5) repeats each key/value head for its group of query heads, as
PyTorch's math path does, and then takes the fused node.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..config import switched_on
from ..ops import attention as _attention_ops  # noqa: F401  (defines torch.ops.lazy_mlir.attention)
from ..host_calls.ops import attention as _attention_host
from . import fused

aten = torch.ops.aten
ops = torch.ops.lazy_mlir


def enabled() -> bool:
    """``LAZY_MLIR_FUSED_ATTENTION`` is not 0/false/off/no (default on)."""
    return switched_on("LAZY_MLIR_FUSED_ATTENTION")


def unfused_reason(query, key, value, attn_mask, dropout_p, is_causal,
                   enable_gqa) -> str | None:
    """Why this call takes PyTorch's decomposition, or None."""
    if not enabled():
        return "switched off"
    if is_causal and attn_mask is not None:
        return "mask and causal"  # (PyTorch's path raises its own error)
    if not fused.all_lazy((query, key, value, attn_mask)):
        return "not all lazy"
    if not 0 <= dropout_p < 1:
        return "dropout"
    if enable_gqa:
        return "gqa"
    if any(t.dtype != torch.float32 for t in (query, key, value)):
        return "not float32"
    if attn_mask is not None and (attn_mask.requires_grad or attn_mask.dtype not in (
            torch.bool, torch.float32)):
        return "mask"
    if not (query.dim() == key.dim() == value.dim() >= 2
            and query.shape[:-2] == key.shape[:-2] == value.shape[:-2]
            and key.shape[-2] == value.shape[-2] and query.shape[-1] == key.shape[-1]):
        return "shapes"
    return fused.compile_reason(ops.attention.default, ops.attention_backward.default)


class _Attention(torch.autograd.Function):
    @staticmethod
    def _compiled_autograd_key(ctx):
        """Compiled autograd (``lazy/backward.py``) caches a backward by this key
        and bakes the ctx's non-tensor attributes into it: without them here a
        causal attention after a non-causal one of the same shapes (or another
        scale) got the first one's backward. (Integers only.)"""
        return (ctx._autograd_function_id, _attention_host.scale_bits(ctx.scale),
                int(ctx.is_causal))

    @staticmethod
    def forward(ctx, query, key, value, attn_mask, is_causal, scale, lse, dropout):
        out, probs = ops.attention.default(query, key, value, attn_mask, is_causal, scale, lse,
                                           dropout)
        ctx.scale, ctx.is_causal = scale, is_causal
        ctx.save_for_backward(query, key, value, out, probs, dropout)
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        if grad_out is None:
            return (None,) * 8
        query, key, value, out, probs, dropout = ctx.saved_tensors
        grads = ops.attention_backward.default(grad_out, query, key, value, out, probs,
                                               ctx.scale, ctx.is_causal, dropout)
        need = ctx.needs_input_grad[:3]
        return (*[g if n else None for g, n in zip(grads, need)], None, None, None, None, None)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """The ``AutogradLazy`` kernel of ``aten::scaled_dot_product_attention``."""
    if enable_gqa:
        group = _gqa_group(query, key, value)
        if group is not None:
            key, value, enable_gqa = _repeat_heads(key, group), _repeat_heads(value, group), False
    why = unfused_reason(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if why is not None:
        return fused.composite(
            "attention", why, aten.scaled_dot_product_attention.default, query, key, value,
            attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    dropout = _dropout_mask(query, key, dropout_p) if dropout_p > 0 else None
    lse = dropout is None and _saves_lse(query, key, value, attn_mask)
    tensors = (query, key, value)
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors)):
        return ops.attention.default(query, key, value, attn_mask, is_causal, scale, lse,
                                     dropout)[0]
    return _Attention.apply(query, key, value, attn_mask, is_causal, scale, lse, dropout)


def _dropout_mask(query, key, p: float):
    """The keep mask of ``P`` (``[..., L, S]``), scaled by ``1 / (1 - p)``:
    ``F.dropout`` of ones, drawn as every dropout on the lazy device."""
    with torch.no_grad():
        ones = query.new_ones((*query.shape[:-1], key.shape[-2]))
        return torch.nn.functional.dropout(ones, p, training=True)


def _gqa_group(query, key, value) -> int | None:
    """How many query heads share each key/value head under ``enable_gqa``;
    None where PyTorch's path must run (ranks under 3, or head counts that
    do not divide: it raises its own error)."""
    if not (query.dim() == key.dim() == value.dim() >= 3):
        return None
    heads, kv_heads = query.shape[-3], key.shape[-3]
    if kv_heads == 0 or value.shape[-3] != kv_heads or heads % kv_heads:
        return None
    return heads // kv_heads


def _repeat_heads(t, group: int):
    """``t.repeat_interleave(group, dim=-3)`` (PyTorch's math path), recorded
    as an expand and a reshape: two view-like nodes, not an index gather."""
    if group == 1:
        return t
    *batch, heads, length, width = t.shape
    return (t.unsqueeze(-3).expand(*batch, heads, group, length, width)
            .reshape(*batch, heads * group, length, width))


def _saves_lse(query, key, value, attn_mask) -> bool:
    """The node's ``lse`` argument: save the row log-sum-exps (not ``P``) where
    the node may become a host call of PyTorch's CPU flash attention
    (``host_calls/ops/attention.py``): no mask, 4-d ``[B, H, L, D]`` operands of one
    head width, large enough (``worth_a_call``), recorded for the cpu target,
    ``LAZY_MLIR_HOST_ATTENTION`` on (``attention_host.enabled``). Decided
    here because it shapes the node's outputs; whether the call is made is
    decided when the graph is compiled
    (``PipelineConfig.host_attention``)."""
    if attn_mask is not None or query.dim() != 4 or not (
            query.shape[-1] == key.shape[-1] == value.shape[-1]):
        return False
    if not (_attention_host.worth_a_call(query, key) and _attention_host.enabled()):
        return False
    from .sync import current_target
    return current_target().name == "cpu"


def register(lib: torch.library.Library) -> None:
    """Install the kernel on ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("scaled_dot_product_attention", scaled_dot_product_attention, "AutogradLazy")
