"""Scaled dot-product attention as one node each way.

``aten::scaled_dot_product_attention`` is CompositeImplicitAutograd: on a
device without a fused kernel (the lazy device) PyTorch runs its math
decomposition, recording per call a causal mask built from ``ones``,
``tril`` and ``where``, a ``_safe_softmax`` (a softmax plus a check for
fully masked rows), the transposes and matmuls, and autograd records their
backward op by op. ``lazy/attention.py`` routes the call to the ops here
instead (under an autograd function):

- ``lazy_mlir::attention(q, k, v, attn_mask, is_causal, scale)``: the output
  and the attention probabilities ``P = softmax(q k^T * scale + mask)``, which
  the backward reads (as eager's math path saves them);
- ``lazy_mlir::attention_backward(grad_out, q, k, v, P, scale)``: the
  gradients of ``q``, ``k`` and ``v``:
  ``dV = P^T dO``, ``dS = P * (dO V^T - rowsum(dO * O))`` (``rowsum(dP * P)``
  equals ``rowsum(dO * O)``), ``dQ = dS K * scale``, ``dK = dS^T Q * scale``.

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
            "bool is_causal, float scale) -> Tensor[]")
_LIB.define("attention_backward(Tensor grad_output, Tensor query, Tensor key, Tensor value, "
            "Tensor output, Tensor probs, float scale) -> Tensor[]")

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
    call (``passes/host_blas.py``) reads in place; ``matmul`` on 4-d tensors
    copies its operands (expand and reshape) instead."""
    return t.reshape(-1, *t.shape[-2:])


def _bmm(a, b, shape):
    return torch.bmm(a, b).reshape(*shape)


def attention(query, key, value, attn_mask, is_causal, scale):
    """``[output, probs]``."""
    batch = query.shape[:-2]
    q, k, v = _flat(query), _flat(key), _flat(value)
    scores = _bmm(q, k.transpose(1, 2), (*batch, q.shape[-2], k.shape[-2])) * scale
    if is_causal:
        scores = scores.masked_fill(~_causal_keep(scores), float("-inf"))
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
    return [_bmm(_flat(probs), v, (*batch, q.shape[-2], v.shape[-1])), probs]


def attention_backward(grad_output, query, key, value, output, probs, scale):
    """``[grad_query, grad_key, grad_value]``."""
    q, k, v, p, go = (_flat(t) for t in (query, key, value, probs, grad_output))
    grad_value = _bmm(p.transpose(1, 2), go, value.shape)
    grad_probs = torch.bmm(go, v.transpose(1, 2))
    row = _flat((grad_output * output).sum(-1, keepdim=True))
    grad_scores = p * (grad_probs - row) * scale
    grad_query = _bmm(grad_scores, k, query.shape)
    grad_key = _bmm(grad_scores.transpose(1, 2), q, key.shape)
    return [grad_query, grad_key, grad_value]


def _attention_shapes(query, key, value, attn_mask, is_causal, scale):
    out = query.new_empty((*query.shape[:-1], value.shape[-1]))
    return [out, query.new_empty((*query.shape[:-1], key.shape[-2]))]


def _attention_backward_shapes(grad_output, query, key, value, output, probs, scale):
    return [query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)]


for _name, _fn, _shapes in (("attention", attention, _attention_shapes),
                            ("attention_backward", attention_backward,
                             _attention_backward_shapes)):
    _LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(_fn)
