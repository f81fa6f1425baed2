"""``nn.MultiheadAttention``'s self-attention on lazy tensors in a dozen recorded ops.

``F.multi_head_attention_forward`` is a Python function, not an aten op, so
no ``AutogradLazy`` kernel can take it (as ``lazy/linear.py`` takes
``F.linear``). In training it splits the packed in-projection with an
``unflatten``, ``unsqueeze``, ``transpose``, ``squeeze``, ``contiguous`` and
three ``select``\\ s, then views and transposes each head: a self-attention
call of ``nn.MultiheadAttention`` records 27 ops, a trip through
``__torch_dispatch__`` each (4-7 us for a view alone), besides the
function's own Python. ``prefer_split_heads()`` puts
``multi_head_attention_forward`` in its place: for the common case, self
attention (``query is key is value``) with the packed projection, it
computes the same values with a view, a permute and an unbind of the
projection (``split_heads``), PyTorch's ``F.scaled_dot_product_attention``
(one node, ``lazy/attention.py``) and ``F.linear`` (one node): 12 recorded
ops. Autograd goes through those ops as it does through PyTorch's. The
suite's tiny 2-layer ``nn.TransformerEncoder`` records 57 ops a step instead
of 87; its capture took 4.21 against 4.84 ms (one process, 16 alternated
blocks with ``LAZY_MLIR_FUSED_MHA`` on and off).

PyTorch's function runs, decided per call (counted ``mha_unfused::<why>``),
for tensors that are not all lazy, separate or absent projection weights,
``bias_k``/``bias_v``/``add_zero_attn``/static keys, a key padding mask,
attention weights asked for (``need_weights``), an unbatched input, a boolean
or 3-d ``attn_mask`` (2-d float masks add as they do in PyTorch's path; the
module makes a boolean mask a float one before calling the function),
``LAZY_MLIR_FUSED_MHA=0``, or anything else; PyTorch's own checks and
errors then apply. Each call taken counts ``lazy::mha``.
"""
from __future__ import annotations

import inspect
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import metrics
from ..config import switched_on
from . import fused
from .tensor import LazyTensor


def unfused_reason(query, key, value, num_heads, in_proj_weight, in_proj_bias, bias_k, bias_v,
                   add_zero_attn, out_proj_weight, out_proj_bias, key_padding_mask,
                   need_weights, attn_mask, use_separate_proj_weight, static_k, static_v,
                   is_causal) -> str | None:
    """Why this call takes PyTorch's function, or None."""
    if not switched_on("LAZY_MLIR_FUSED_MHA"):
        return "switched off"
    if not fused.all_lazy((query, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias,
                           attn_mask)):
        return "not all lazy"
    if not (query is key and key is value):
        return "not self attention"
    if use_separate_proj_weight or in_proj_weight is None:
        return "separate projections"
    if bias_k is not None or bias_v is not None or add_zero_attn or static_k is not None \
            or static_v is not None:
        return "extra keys"
    if key_padding_mask is not None:
        return "key padding mask"
    if need_weights:
        return "weights asked for"
    if query.dim() != 3 or query.shape[-1] % num_heads or in_proj_weight.shape != (
            3 * query.shape[-1], query.shape[-1]):
        return "shapes"
    if attn_mask is not None and not is_causal and (
            attn_mask.dim() != 2 or not attn_mask.dtype.is_floating_point):
        return "mask"
    if is_causal and attn_mask is None:
        return "causal without a mask"  # (PyTorch's function raises its error)
    return None


def split_heads(projected: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
    """``[L, B, 3E]`` packed projections -> query, key, value ``[B, H, L, E/H]``:
    the views ``F.multi_head_attention_forward`` makes, as a view, a permute
    and an unbind (the values are PyTorch's; PyTorch's are copies)."""
    length, batch, width = projected.shape
    embed = width // 3
    return projected.view(length, batch, 3, heads, embed // heads).permute(2, 1, 3, 0, 4).unbind(0)


def self_attention(query, num_heads, in_proj_weight, in_proj_bias, dropout_p, out_proj_weight,
                   out_proj_bias, training, attn_mask, is_causal) -> torch.Tensor:
    """``[L, B, E]`` -> ``[L, B, E]``: what PyTorch's function returns first."""
    length, batch, embed = query.shape
    q, k, v = split_heads(F.linear(query, in_proj_weight, in_proj_bias), num_heads)
    if is_causal:
        attn_mask = None  # (as PyTorch's function does without a key padding mask)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p if training else 0.0,
                                         is_causal)
    return F.linear(out.permute(2, 0, 1, 3).reshape(length, batch, embed), out_proj_weight,
                    out_proj_bias)


_original = None  # PyTorch's F.multi_head_attention_forward, once wrapped


def multi_head_attention_forward(
        query: Tensor, key: Tensor, value: Tensor, embed_dim_to_check: int, num_heads: int,
        in_proj_weight: Optional[Tensor], in_proj_bias: Optional[Tensor],
        bias_k: Optional[Tensor], bias_v: Optional[Tensor], add_zero_attn: bool,
        dropout_p: float, out_proj_weight: Tensor, out_proj_bias: Optional[Tensor],
        training: bool = True, key_padding_mask: Optional[Tensor] = None,
        need_weights: bool = True, attn_mask: Optional[Tensor] = None,
        use_separate_proj_weight: bool = False, q_proj_weight: Optional[Tensor] = None,
        k_proj_weight: Optional[Tensor] = None, v_proj_weight: Optional[Tensor] = None,
        static_k: Optional[Tensor] = None, static_v: Optional[Tensor] = None,
        average_attn_weights: bool = True, is_causal: bool = False,
) -> Tuple[Tensor, Optional[Tensor]]:
    """PyTorch's ``F.multi_head_attention_forward``, but ``self_attention``
    for the lazy calls it can take. TorchScript compiles only the last
    statement (``torch.jit.is_scripting()`` is a constant to it): a scripted
    ``nn.MultiheadAttention`` is PyTorch's, and saves as PyTorch's."""
    if not torch.jit.is_scripting():
        if type(query) is LazyTensor:  # (one check for everyone else)
            why = unfused_reason(query, key, value, num_heads, in_proj_weight, in_proj_bias,
                                 bias_k, bias_v, add_zero_attn, out_proj_weight, out_proj_bias,
                                 key_padding_mask, need_weights, attn_mask,
                                 use_separate_proj_weight, static_k, static_v, is_causal)
            if why is None and query.shape[-1] == embed_dim_to_check:
                metrics.counter_inc("lazy::mha")
                return self_attention(query, num_heads, in_proj_weight, in_proj_bias, dropout_p,
                                      out_proj_weight, out_proj_bias, training, attn_mask,
                                      is_causal), None
            metrics.counter_inc(f"mha_unfused::{why or 'shapes'}")
    return _original(
        query, key, value, embed_dim_to_check, num_heads, in_proj_weight, in_proj_bias,
        bias_k, bias_v, add_zero_attn, dropout_p, out_proj_weight, out_proj_bias,
        training=training, key_padding_mask=key_padding_mask, need_weights=need_weights,
        attn_mask=attn_mask, use_separate_proj_weight=use_separate_proj_weight,
        q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight, v_proj_weight=v_proj_weight,
        static_k=static_k, static_v=static_v, average_attn_weights=average_attn_weights,
        is_causal=is_causal)


def prefer_split_heads() -> None:
    """Put ``multi_head_attention_forward`` in PyTorch's place (once per
    process; not over a function of another signature)."""
    global _original
    if F.multi_head_attention_forward is multi_head_attention_forward or _parameters(
            F.multi_head_attention_forward) != _parameters(multi_head_attention_forward):
        return
    _original = F.multi_head_attention_forward
    F.multi_head_attention_forward = multi_head_attention_forward


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)
