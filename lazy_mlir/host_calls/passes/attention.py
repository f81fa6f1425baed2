"""Attention as calls into PyTorch's CPU flash attention (the in-process cpu
session only): eager's own kernel, run from the IREE module.

``ops/attention.py`` lowers ``lazy_mlir::attention`` / ``attention_backward``
to ``bmm``s (host BLAS calls on the cpu), a softmax and the head
split/merge transposes that ``bmm``'s ``[B*H, L, D]`` operands need: on the
suite's medium GPT-2 ~70 ms CPU a step at one thread, where eager's flash
kernel takes 45-50 ms (``/work/notes/issue-26-attn1.md``).

Where ``PipelineConfig.attention_as_calls(target)`` holds, ``decompositions()``
replaces the two ops' IMPORT decompositions: a node recorded with ``lse``
(``lazy/attention.py``: no mask, 4-d, cpu) becomes one
``lazy_mlir::host_attention`` (``host_calls/ops/attention.py``) forward and one
``host_attention_backward``, on ``[B, L, H, D]`` operands (the transposes
back to the model's layout cancel out), which torch-mlir imports as
``torch.operator``s; ``calls_instead`` turns those into calls of external
functions ``@lazy_mlir_attention.flash[_backward][_causal]``, which
iree-compile makes imports of the module and ``host_calls/runtime/attention.py``
implements. Other nodes keep the decomposition. As ``host_calls/passes/rnn.py``:
such a module runs the linalg pipeline without torch-mlir's backend-contract
check (``torch_calls.without_contract_check``, ``.contract_violation``).
"""
from __future__ import annotations

import torch

from ...dialects import torch_calls as T
from ...ops import attention as _attention_ops  # noqa: F401  (torch.ops.lazy_mlir.attention)
from ..ops import attention as H

MODULE = "lazy_mlir_attention"
"""The name of the import module (``host_calls/runtime/attention.py`` registers it)."""

CALL_MARK = f"call @{MODULE}."
"""How a call reads in the printed module."""

_OPERATORS = {"torch.lazy_mlir.host_attention": "flash",
              "torch.lazy_mlir.host_attention_backward": "flash_backward"}
ops = torch.ops.lazy_mlir


def _token_major(*tensors):
    """``[B, H, L, D]`` as ``[B, L, H, D]`` (the kernel's layout)."""
    return [t.transpose(1, 2) for t in tensors]


def _heads_first(t):
    """``[B, L, H, D]`` as the contiguous ``[B, H, L, D]`` the node's outputs
    were recorded as (views after it were checked against those strides: a
    transposed view fails to ``view`` as ``nn.MultiheadAttention`` does). In
    the models' ``transpose(1, 2)`` + ``reshape`` after it, IREE folds the
    copy and the two transposes away."""
    return t.transpose(1, 2).contiguous()


def host_attention(query, key, value, attn_mask, is_causal, scale, lse=False, dropout=None):
    """``lazy_mlir::attention`` as one host call (``NotImplemented``, hence the
    decomposition, for nodes that save ``P``)."""
    if not lse or attn_mask is not None or dropout is not None or query.dim() != 4:
        return NotImplemented
    out, row_lse = ops.host_attention(*_token_major(query, key, value), H.scale_bits(scale),
                                      is_causal)
    return [_heads_first(out), row_lse]


def host_attention_backward(grad_output, query, key, value, output, probs, scale,
                            is_causal=False, dropout=None):
    """``lazy_mlir::attention_backward`` as one host call, given the forward's
    ``lse`` (``probs`` one dimension short)."""
    if query.dim() != 4 or probs.dim() != 3 or dropout is not None:
        return NotImplemented
    grads = ops.host_attention_backward(*_token_major(grad_output, query, key, value, output),
                                        probs, H.scale_bits(scale), is_causal)
    return [_heads_first(g) for g in grads]


def decompositions() -> dict:
    """The IMPORT decompositions that win over ``ops/attention.py``'s where
    the host calls are on."""
    return {ops.attention.default: host_attention,
            ops.attention_backward.default: host_attention_backward}


def _callee(operator: str, is_causal: bool) -> str | None:
    kind = _OPERATORS.get(operator)
    return None if kind is None else f"{MODULE}.{kind}{'_causal' if is_causal else ''}"


def calls_instead(module) -> int:
    """Replace every ``host_attention*`` ``torch.operator`` of the imported
    torch-dialect ``module`` by a call of ``@lazy_mlir_attention.<fn>[_causal]``
    (tensors cast to dynamic shapes and back, the scale's bits an integer
    operand), in place; returns how many."""
    return T.operators_as_calls(module, _callee)
