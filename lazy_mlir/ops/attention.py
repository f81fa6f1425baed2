"""Scaled dot-product attention as one node each way.

``aten::scaled_dot_product_attention`` is CompositeImplicitAutograd: on a
device without a fused kernel (the lazy device) PyTorch runs its math
decomposition, recording per call a causal mask built from ``ones``,
``tril`` and ``where``, a ``_safe_softmax`` (a softmax plus a check for
fully masked rows), the transposes and matmuls, and autograd records their
backward op by op. ``lazy/attention.py`` routes the call to the ops here
instead (under an autograd function):

- ``lazy_mlir::attention(q, k, v, attn_mask, is_causal, scale, lse)``: the
  output and the attention probabilities ``P = softmax(q k^T * scale + mask)``,
  which the backward reads (as eager's math path saves them); with ``lse``
  (no mask; recorded where the node may become a host call of PyTorch's CPU
  flash attention, ``host_calls/passes/attention.py``) the row log-sum-exps
  ``log(sum(exp(q k^T * scale)))`` instead, as the flash kernel saves them,
  from which the backward recomputes ``P``; with ``dropout`` (attention
  dropout in training: the keep mask already scaled by ``1 / (1 - p)``, drawn
  by the caller) the output is ``(P * dropout) v``, as eager's math path
  drops ``P`` before its matmul;
- ``lazy_mlir::attention_backward(grad_out, q, k, v, out, P or lse, scale,
  is_causal, dropout)``: the gradients of ``q``, ``k`` and ``v``:
  ``dV = (P * D)^T dO``, ``dP = dO V^T * D``, ``dS = P * (dP - rowsum(dO * O))``
  (``rowsum(dP * P)`` equals ``rowsum(dO * O)``, the dropout mask ``D``
  included), ``dQ = dS K * scale``, ``dK = dS^T Q * scale``.

Both become aten ops on the fx graph before torch-mlir imports it (IMPORT
scope). The causal mask is an index comparison (IREE builds it inside the
softmax's dispatch, no mask tensor), the softmax is a plain one where no row
can be fully masked (no mask, or causal), and a safe one (fully masked rows
give zeros, as ``_safe_softmax``) where a mask is given. The same functions
are the ops' CPU kernels.
"""
from __future__ import annotations

import torch

from .registry import IMPORT, register_decomposition

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, "
            "bool is_causal, float scale, bool lse=False, Tensor? dropout=None) -> Tensor[]")
_LIB.define("attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value, "
            "Tensor output, Tensor probs, float scale, bool is_causal=False, "
            "Tensor? dropout=None) -> Tensor[]")

ops = torch.ops.lazy_mlir


def _causal_keep(scores):
    """True where query ``i`` may attend to key ``j`` (``j <= i``: PyTorch's
    ``is_causal``, the upper left ``tril`` of an ``L x S`` matrix)."""
    rows, cols = scores.shape[-2:]
    i = torch.arange(rows, device=scores.device).unsqueeze(-1)
    j = torch.arange(cols, device=scores.device)
    return j <= i


def _flat(t):
    """``[..., n, m]`` as ``[batch, n, m]``: ``bmm`` with a transposed operand is
    a ``linalg.transpose`` into ``linalg.batch_matmul``, which the host BLAS
    call (``host_calls/passes/blas.py``) reads in place; ``matmul`` on 4-d tensors
    copies its operands (expand and reshape) instead."""
    return t.reshape(-1, *t.shape[-2:])


def _bmm(a, b, shape):
    return torch.bmm(a, b).reshape(*shape)


def _scores(q, k, batch, scale, is_causal):
    scores = _bmm(q, k.transpose(1, 2), (*batch, q.shape[-2], k.shape[-2])) * scale
    if is_causal:
        scores = scores.masked_fill(~_causal_keep(scores), float("-inf"))
    return scores


def attention(query, key, value, attn_mask, is_causal, scale, lse=False, dropout=None):
    """``[output, probs]``, or ``[output, lse]`` with ``lse``."""
    batch = query.shape[:-2]
    q, k, v = _flat(query), _flat(key), _flat(value)
    scores = _scores(q, k, batch, scale, is_causal)
    if lse:
        if attn_mask is not None or dropout is not None:
            raise ValueError("lazy_mlir::attention saves log-sum-exps only without a mask "
                             "or dropout")
        row_lse = torch.logsumexp(scores, -1)
        probs = torch.exp(scores - row_lse.unsqueeze(-1))
        return [_bmm(_flat(probs), v, (*batch, q.shape[-2], v.shape[-1])), row_lse]
    if attn_mask is None:
        probs = torch.softmax(scores, -1)
    else:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
        # A row with every key masked gives zeros (``_safe_softmax``), not NaN.
        biggest = scores.amax(-1, keepdim=True)
        masked = biggest == float("-inf")
        e = torch.exp(scores - torch.where(masked, torch.zeros_like(biggest), biggest))
        total = e.sum(-1, keepdim=True)
        probs = torch.where(masked, torch.zeros_like(e), e / total)
    kept = probs if dropout is None else probs * dropout
    return [_bmm(_flat(kept), v, (*batch, q.shape[-2], v.shape[-1])), probs]


def attention_backward(grad_output, query, key, value, output, probs, scale, is_causal=False,
                       dropout=None):
    """``[grad_query, grad_key, grad_value]``; ``probs`` one dimension short
    is the forward's ``lse``: ``P`` recomputed from it."""
    q, k, v, go = (_flat(t) for t in (query, key, value, grad_output))
    if probs.dim() == query.dim() - 1:
        scores = _scores(q, k, query.shape[:-2], scale, is_causal)
        probs = torch.exp(scores - probs.unsqueeze(-1))
    p = _flat(probs)
    kept = p if dropout is None else p * _flat(dropout)
    grad_value = _bmm(kept.transpose(1, 2), go, value.shape)
    grad_probs = torch.bmm(go, v.transpose(1, 2))
    if dropout is not None:
        grad_probs = grad_probs * _flat(dropout)
    row = _flat((grad_output * output).sum(-1, keepdim=True))
    grad_scores = p * (grad_probs - row) * scale
    grad_query = _bmm(grad_scores, k, query.shape)
    grad_key = _bmm(grad_scores.transpose(1, 2), q, key.shape)
    return [grad_query, grad_key, grad_value]


def _attention_shapes(query, key, value, attn_mask, is_causal, scale, lse=False,
                      dropout=None):
    out = query.new_empty((*query.shape[:-1], value.shape[-1]))
    saved = query.shape[:-1] if lse else (*query.shape[:-1], key.shape[-2])
    return [out, query.new_empty(saved)]


def _attention_backward_shapes(grad_output, query, key, value, output, probs, scale,
                               is_causal=False, dropout=None):
    return [query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)]


for _name, _fn, _shapes in (("attention", attention, _attention_shapes),
                            ("attention_backward", attention_backward,
                             _attention_backward_shapes)):
    _LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(_fn)
