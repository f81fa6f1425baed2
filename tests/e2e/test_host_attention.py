"""Attention nodes as host calls into PyTorch's CPU flash attention
(``host_calls/passes/attention.py``, ``host_calls/runtime/attention.py``) on the lazy
device, against eager: outputs and q/k/v gradients with the calls and with
``LAZY_MLIR_HOST_ATTENTION=0``, the count of calls, a sync between forward
and backward, and a tiny GPT-2 that trains like eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.host_calls.ops import attention as attention_host
from lazy_mlir.models.real import real_model
from e2e_helpers import Counters, assert_trains_like_eager

CALLS = "HostAttentionCall"


@pytest.fixture(autouse=True)
def _small_attention_is_called(monkeypatch, request):
    """The calls on (``auto`` leaves them off where PyTorch's GEMM is not
    MKL's on an Intel CPU, ``host_gemm``); these shapes are below
    ``MIN_MACS``: called anyway, but where a test says not."""
    monkeypatch.setenv("LAZY_MLIR_HOST_ATTENTION", "1")
    if "keeps_small" not in request.node.name:
        monkeypatch.setattr(attention_host, "MIN_MACS", 0)


def _qkv(seed=0):
    """[B, H, L, D] views of [B, L, H, D] tensors, as the models hand them over."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 9, 3, 8, generator=g).transpose(1, 2) for _ in range(3)]


def _weights(out):
    return torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(out.device).cos()


def _run(qkv, causal, device, mask=None, sync_between=False, scale=None):
    ts = [t.detach().to(device).requires_grad_() for t in qkv]
    out = F.scaled_dot_product_attention(*ts, attn_mask=mask if mask is None else mask.to(device),
                                         is_causal=causal, scale=scale)
    if sync_between:
        lm.mark_step()
    (out * _weights(out)).sum().backward()
    return [out, *[t.grad for t in ts]]


def _as_eager(causal, mask=None, sync_between=False, scale=None) -> Counters:
    qkv = _qkv()
    expected = _run(qkv, causal, "cpu", mask, scale=scale)
    c = Counters()
    actual = _run(qkv, causal, "lazy", mask, sync_between, scale)
    lm.mark_step()
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    return c


@pytest.mark.parametrize("causal", [False, True])
def test_one_call_each_way_as_eager(causal):
    c = _as_eager(causal)
    assert c.delta(CALLS) == 2 and c.delta("lazy::attention") == 1


def test_calls_that_differ_only_in_causality_or_scale_each_get_their_backward():
    """Compiled autograd's cache does not tell them apart; the one-node
    backward's templates do (``lazy/backward.py``: the contexts' keys)."""
    for causal, scale in ((False, None), (True, None), (False, 0.3), (True, 0.3)):
        assert _as_eager(causal, scale=scale).delta(CALLS) == 2


def test_switched_off_the_decomposition_runs_as_eager(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_HOST_ATTENTION", "0")
    c = _as_eager(True)
    assert c.delta(CALLS) == 0 and c.delta("lazy::attention") == 1


def test_a_mask_keeps_the_decomposition():
    mask = torch.rand(9, 9, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[:, 0] = True
    c = _as_eager(False, mask)
    assert c.delta(CALLS) == 0 and c.delta("lazy::attention") == 1


def test_attention_below_min_macs_keeps_small_the_decomposition():
    c = _as_eager(True)
    assert c.delta(CALLS) == 0 and c.delta("lazy::attention") == 1


def test_a_sync_between_forward_and_backward_hands_lse_over():
    """The forward's graph outputs the log-sum-exps, the backward's reads them."""
    c = _as_eager(True, sync_between=True)
    assert c.delta(CALLS) == 2


def test_no_grad_forward_makes_one_call():
    q, k, v = _qkv()
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    c = Counters()
    with torch.no_grad():
        actual = F.scaled_dot_product_attention(*(t.to("lazy") for t in (q, k, v)),
                                                is_causal=True)
        lm.mark_step()
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert c.delta(CALLS) == 1


@pytest.mark.slow  # CI time (~75 s on 2 cores): the MHA layout test trains through the calls
def test_gpt2_trains_like_eager_through_the_calls():
    """A one-layer tiny GPT-2 (causal self-attention), 3 AdamW steps: losses
    and weights as eager's, one call each way a step, no op run eagerly."""
    c = assert_trains_like_eager(real_model("gpt2", "tiny", layers=1))
    assert c.delta(CALLS) == 6
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]


def test_multihead_attention_layout_trains_like_eager():
    """``nn.TransformerEncoder`` (the suite's LM, one layer): its q, k, v lie
    as ``[L, B, H, D]`` and it ``view``s the output as recorded (contiguous
    ``[B, H, L, D]``): the loss and every gradient as eager's, one call each way."""
    rm = real_model("transformer", "tiny", layers=1)
    eager, model = rm.make(), rm.make().to("lazy")
    c = Counters()
    expected = rm.loss(eager, rm.batch(0, "cpu"))
    expected.backward()
    actual = rm.loss(model, rm.batch(0, "lazy"))
    actual.backward()
    lm.mark_step()
    assert actual.item() == pytest.approx(expected.item(), rel=1e-5)
    for (name, pe), pl in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(pl.grad.cpu(), pe.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert c.delta(CALLS) == 2
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]
