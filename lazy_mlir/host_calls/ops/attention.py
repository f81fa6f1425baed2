"""Attention as PyTorch's own CPU kernel: the flash attention that eager
``F.scaled_dot_product_attention`` runs on the CPU
(``aten::_scaled_dot_product_flash_attention_for_cpu`` forward, its
``_backward``; ~45-50 ms of eager's one-thread step on the suite's medium
GPT-2, against ~70 ms for the ``bmm`` calls, softmax and head transposes
the decomposition of ``lazy_mlir::attention`` runs).

``host_calls/passes/attention.py`` lowers ``lazy_mlir::attention`` /
``attention_backward`` nodes recorded with ``lse`` (``lazy/attention.py``)
to the two ops below for the in-process cpu session, and
``host_calls/runtime/attention.py`` runs them from the IREE module as host calls.

Operands and results are in the kernel's own memory layout,
``[batch, length, heads, head width]``: the models hand attention
``[B, L, H, D]`` projections viewed as ``[B, H, L, D]``, so the head
transposes around the call fold away (a transpose of a transpose) instead of
becoming copies. ``lse`` is ``[B, H, L]``, the row log-sum-exps of the scaled
scores, which the forward saves for the backward (as eager's autograd does).
The scale is an ``int`` (the float64's bits): an IREE import takes it exactly
as an i64 (a float argument would be demoted to float32).
"""
from __future__ import annotations

import struct

import torch

from .. import gemm as host_gemm

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("host_attention(Tensor query, Tensor key, Tensor value, int scale_bits, "
            "bool is_causal) -> (Tensor, Tensor)")
_LIB.define("host_attention_backward(Tensor grad_output, Tensor query, Tensor key, "
            "Tensor value, Tensor output, Tensor lse, int scale_bits, bool is_causal) -> "
            "(Tensor, Tensor, Tensor)")

aten = torch.ops.aten

MIN_MACS = 1 << 24
"""Attention with fewer multiply-adds in ``q k^T`` stays IREE's: a host call
is a sync point with Python around it (the tiny suite, 0.26 M, stays; the
medium suite's 17-67 M are called). ``host_calls/passes/blas.py``'s bound for
matmuls, for the same reason."""


def worth_a_call(query, key) -> bool:
    """``query`` ``[B, H, L, D]`` against ``key`` ``[B, H, S, D]`` is large
    enough for a host call (``MIN_MACS``)."""
    return query.numel() * key.shape[-2] >= MIN_MACS


def enabled() -> bool:
    """``LAZY_MLIR_HOST_ATTENTION``: 1, 0 or auto (the default: on where
    PyTorch's GEMM is MKL on an Intel CPU, ``host_gemm``)."""
    return host_gemm.switch("LAZY_MLIR_HOST_ATTENTION")


def scale_bits(scale: float) -> int:
    """``scale`` as the int64 with its float64's bits."""
    return struct.unpack("<q", struct.pack("<d", float(scale)))[0]


def scale_of(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", int(bits)))[0]


def _heads_first(*tensors):
    return [t.transpose(1, 2) for t in tensors]


def flash(query, key, value, bits: int, is_causal: bool):
    """``(output, lse)``; ``[B, L, H, D]`` operands and output."""
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(
        *_heads_first(query, key, value), 0.0, is_causal, scale=scale_of(bits))
    return out.transpose(1, 2), lse


def flash_backward(grad_output, query, key, value, output, lse, bits: int, is_causal: bool):
    """``(grad_query, grad_key, grad_value)``, all ``[B, L, H, D]``."""
    grads = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        *_heads_first(grad_output, query, key, value, output), lse, 0.0, is_causal,
        scale=scale_of(bits))
    return tuple(g.transpose(1, 2) for g in grads)


def _flash_shapes(query, key, value, bits, is_causal):
    b, length, heads, _ = query.shape
    return query.new_empty(query.shape), query.new_empty((b, heads, length))


def _flash_backward_shapes(grad_output, query, key, value, output, lse, bits, is_causal):
    return query.new_empty(query.shape), key.new_empty(key.shape), value.new_empty(value.shape)


_LIB.impl("host_attention", lambda *a: tuple(t.contiguous() for t in flash(*a)),
          "CompositeExplicitAutograd")
_LIB.impl("host_attention_backward",
          lambda *a: tuple(t.contiguous() for t in flash_backward(*a)),
          "CompositeExplicitAutograd")
torch.library.register_fake("lazy_mlir::host_attention", _flash_shapes, lib=_LIB)
torch.library.register_fake("lazy_mlir::host_attention_backward", _flash_backward_shapes,
                            lib=_LIB)
