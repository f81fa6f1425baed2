"""Attention as host calls into PyTorch's CPU flash attention
(``host_calls/passes/attention.py``, ``host_calls/ops/attention.py``): the host
decompositions against eager and against the decomposition that saves
log-sum-exps, and the gating (in-process cpu only)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lazy_mlir.ops import attention as math_attention
from lazy_mlir.host_calls.ops import attention as attention_host
from lazy_mlir.host_calls.passes import attention as host_attention


def _qkv(heads_first_strides: bool):
    """[B, H, L, D] views of [B, L, H, D] projections (as the models hand
    them over), or contiguous [B, H, L, D]."""
    g = torch.Generator().manual_seed(0)
    if heads_first_strides:
        return [torch.randn(2, 3, 7, 4, generator=g) for _ in range(3)]
    return [torch.randn(2, 7, 3, 4, generator=g).transpose(1, 2) for _ in range(3)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_first_strides", [False, True])
def test_the_host_decompositions_compute_eagers_values_and_gradients(causal,
                                                                      heads_first_strides):
    q, k, v = _qkv(heads_first_strides)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=0.37)
    expected.backward(grad_out)
    out, lse = host_attention.host_attention(q, k, v, None, causal, 0.37, True)
    grads = host_attention.host_attention_backward(grad_out, q, k, v, out, lse, 0.37, causal)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
    for g, leaf in zip(grads, leaves):
        torch.testing.assert_close(g, leaf.grad, rtol=1e-5, atol=1e-6)
    # The decomposition that saves lse computes the kernel's lse, and its
    # backward takes the kernel's: forward and backward lowered either way mix.
    math_out, math_lse = math_attention.attention(q, k, v, None, causal, 0.37, True)
    torch.testing.assert_close(math_lse, lse, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(math_out, out, rtol=1e-5, atol=1e-6)
    for g, leaf in zip(math_attention.attention_backward(grad_out, q, k, v, out, lse, 0.37,
                                                         causal), leaves):
        torch.testing.assert_close(g, leaf.grad, rtol=1e-5, atol=1e-5)


def test_nodes_that_save_probabilities_keep_the_decomposition():
    q, k, v = _qkv(False)
    assert host_attention.host_attention(q, k, v, None, True, 0.5, False) is NotImplemented
    assert host_attention.host_attention(q, k, v, torch.ones(7, 7), False, 0.5,
                                         True) is NotImplemented
    probs = torch.ones(2, 3, 7, 7)
    assert host_attention.host_attention_backward(q, q, k, v, q, probs, 0.5,
                                                  False) is NotImplemented


def test_only_attention_worth_a_call_is_called():
    q = torch.empty(8, 8, 128, 64)  # the medium suite's: 67 M multiply-adds in q k^T
    assert attention_host.worth_a_call(q, q)
    small = torch.empty(4, 2, 32, 32)  # the tiny suite's: 0.26 M
    assert not attention_host.worth_a_call(small, small)


def test_the_scale_travels_exactly_as_an_integer():
    for scale in (0.125, 0.1767766952966369, 1 / 3, 1e-30):
        assert attention_host.scale_of(attention_host.scale_bits(scale)) == scale
