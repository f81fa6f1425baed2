"""``F.scaled_dot_product_attention`` on the lazy device as one node forward and
one backward (``lazy/attention.py``, ``ops/attention.py``), against eager
PyTorch: outputs and gradients for every mask form, PyTorch's own path for
what is not fused (and with ``LAZY_MLIR_FUSED_ATTENTION=0``), and a
transformer that trains like eager either way."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.config import PipelineConfig
from lazy_mlir.lazy import attention as lazy_attention
from lazy_mlir.models.real import real_model
from e2e_helpers import Counters, assert_trains_like_eager

L, S, E = 6, 5, 4


def _counters(c: Counters) -> dict:
    names = [n for n in lm.metrics.counter_names()
             if n.startswith(("lazy::attention", "attention_unfused::", "aten::", "lazy::bmm",
                              "lazy::_safe_softmax", "lazy::tril"))]
    return {n: c.delta(n) for n in names if c.delta(n)}


def _case(mask_kind):
    """q, k, v (2 x 3 heads; 3-d for the float mask case) and the mask."""
    g = torch.Generator().manual_seed(0)
    batch = (6,) if mask_kind == "float" else (2, 3)
    q = torch.randn(*batch, L, E, generator=g)
    k = torch.randn(*batch, S, E, generator=g)
    v = torch.randn(*batch, S, E + 1, generator=g)
    mask = None
    if mask_kind == "bool":
        mask = torch.rand(2, 1, L, S, generator=g) > 0.4
        mask[1, 0, 2] = False  # a fully masked row: zeros, as eager's _safe_softmax
    elif mask_kind == "float":
        mask = torch.randn(L, S, generator=g)  # broadcast over the batch
    return q, k, v, mask


def _run(q, k, v, mask, causal, scale, device):
    ts = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=None if mask is None else
                                         mask.to(device), is_causal=causal, scale=scale)
    (out * torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
     .cos()).sum().backward()
    return [out, *[t.grad for t in ts]]


def _lazy_as_eager(mask_kind, causal, scale) -> dict:
    """Output and q/k/v gradients on the lazy device as on the CPU; the
    counters the lazy run moved."""
    q, k, v, mask = _case(mask_kind)
    expected = _run(q, k, v, mask, causal, scale, "cpu")
    c = Counters()
    actual = _run(q, k, v, mask, causal, scale, "lazy")
    lm.mark_step()
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    return _counters(c)


@pytest.mark.parametrize("mask_kind,causal,scale", [
    (None, False, None), (None, True, None), ("bool", False, 0.3), ("float", False, None)])
def test_one_node_each_way_as_eager(mask_kind, causal, scale):
    counts = _lazy_as_eager(mask_kind, causal, scale)
    assert counts.get("lazy::attention") == 1, counts
    assert not [n for n in counts if n != "lazy::attention"], counts  # no math path, no fallback


def test_no_grad_forward_records_the_forward_alone():
    q, k, v, _ = _case(None)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    c = Counters()
    with torch.no_grad():
        actual = F.scaled_dot_product_attention(q.to("lazy"), k.to("lazy"), v.to("lazy"),
                                                is_causal=True)
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)
    assert _counters(c) == {"lazy::attention": 1}


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_takes_the_node(causal):
    """``enable_gqa`` (6 query heads over 2 key/value heads, as transformers'
    Llama-style decoders pass it): one fused node each way, eager's output and
    gradients (each key/value head's gradient summed over its group)."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, h, L, E, generator=g) for h in (6, 2, 2))

    def run(device):
        ts = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*ts, is_causal=causal, enable_gqa=True)
        (out * out.detach().cos()).sum().backward()
        return [out, *[t.grad for t in ts]]

    expected = run("cpu")
    c = Counters()
    actual = run("lazy")
    lm.mark_step()
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    counts = _counters(c)
    assert counts.get("lazy::attention") == 1 and not [
        n for n in counts if n != "lazy::attention"], counts


@pytest.mark.parametrize("mask_kind,causal", [(None, False), (None, True), ("bool", False)])
def test_attention_dropout_takes_the_node(mask_kind, causal, monkeypatch):
    """``dropout_p`` (transformers' attention dropout in training): one node
    each way, the lazy device's own keep mask (about ``p`` of ``P`` dropped,
    the rest scaled by ``1 / (1 - p)``); output and gradients as eager's math
    path computes them with that mask."""
    q, k, v, mask = _case(mask_kind)
    p = 0.3
    drawn = []
    draw = lazy_attention._dropout_mask
    monkeypatch.setattr(lazy_attention, "_dropout_mask",
                        lambda *a: drawn.append(draw(*a)) or drawn[-1])
    c = Counters()
    ts = [t.detach().to("lazy").requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=None if mask is None else
                                         mask.to("lazy"), dropout_p=p, is_causal=causal)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (out * weights.to("lazy")).sum().backward()
    lm.mark_step()
    counts = _counters(c)
    assert counts.get("lazy::attention") == 1 and not [
        n for n in counts if n != "lazy::attention"], counts
    keep = drawn[0].cpu()
    assert keep.unique().tolist() == [0.0, torch.tensor(1 / (1 - p)).item()]
    assert abs((keep == 0).float().mean().item() - p) < 0.15

    ref = [t.detach().requires_grad_() for t in (q, k, v)]
    scores = ref[0] @ ref[1].transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)  # (a fully masked row: zeros)
    expected = (probs * keep) @ ref[2]
    (expected * weights).sum().backward()
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
    for t, r in zip(ts, ref):
        torch.testing.assert_close(t.grad.cpu(), r.grad, rtol=1e-5, atol=1e-5)


def test_grouped_query_attention_with_heads_that_do_not_divide_raises_pytorchs_error():
    q, k = torch.randn(1, 3, L, E), torch.randn(1, 2, S, E)
    with pytest.raises(RuntimeError) as eager:
        F.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    with pytest.raises(RuntimeError) as lazy:
        F.scaled_dot_product_attention(q.to("lazy"), k.to("lazy"), k.to("lazy"),
                                       enable_gqa=True)
        lm.mark_step()
    assert str(lazy.value).split("\n")[0] == str(eager.value).split("\n")[0]


def test_switched_off_and_unfused_cases_take_pytorchs_path(monkeypatch):
    q, k, v, _ = _case(None)
    expected = _run(q, k, v, None, True, None, "cpu")
    monkeypatch.setenv("LAZY_MLIR_FUSED_ATTENTION", "0")
    c = Counters()
    actual = _run(q, k, v, None, True, None, "lazy")
    lm.mark_step()
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    counts = _counters(c)
    assert counts.get("attention_unfused::switched off") == 1 and "lazy::attention" not in counts
    monkeypatch.delenv("LAZY_MLIR_FUSED_ATTENTION")
    # a mask that requires grad: PyTorch's path (its gradient is not ours to give)
    mask = torch.randn(L, S, requires_grad=True)
    c.snapshot()
    lm_mask = mask.detach().to("lazy").requires_grad_()
    out = F.scaled_dot_product_attention(q.to("lazy"), k.to("lazy"), v.to("lazy"),
                                         attn_mask=lm_mask)
    out.sum().backward()
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    torch.testing.assert_close(lm_mask.grad.cpu(), mask.grad, rtol=1e-5, atol=1e-5)
    assert _counters(c).get("attention_unfused::mask") == 1


def test_unfused_reasons():
    q, k, v, _ = _case(None)
    ql, kl, vl = (t.to("lazy") for t in (q, k, v))
    reason = lazy_attention.unfused_reason
    assert reason(ql, kl, vl, None, 0.0, True, False) is None
    assert reason(q, k, v, None, 0.0, False, False) == "not all lazy"
    assert reason(ql, kl, vl, None, 0.1, False, False) is None
    assert reason(ql, kl, vl, None, 1.0, False, False) == "dropout"
    assert reason(ql, kl, vl, None, 0.0, False, True) == "gqa"
    assert reason(ql.double(), kl, vl, None, 0.0, False, False) == "not float32"
    assert reason(ql, kl, vl, torch.ones(L, S, dtype=torch.bool, device="lazy"), 0.0, True,
                  False) == "mask and causal"
    assert reason(ql, kl, vl, torch.ones(L, S, device="lazy").half(), 0.0, False,
                  False) == "mask"
    assert reason(ql, kl[:1], vl[:1], None, 0.0, False, False) == "shapes"
    lm.set_config(PipelineConfig(decompositions=False))
    try:
        assert reason(ql, kl, vl, None, 0.0, False, False) == "decompositions off"
    finally:
        lm.set_config(None)


# CI trains through the node; PyTorch's math path (39 s on 2 cores, the op-by-op
# backward of every attention op) is slow-marked: the unit cases above cover it.
@pytest.mark.parametrize("fused", ["1", pytest.param("0", marks=pytest.mark.slow)])
def test_gpt2_trains_like_eager(fused, monkeypatch):
    """A one-layer tiny GPT-2 (causal self-attention through SDPA), 3 AdamW
    steps: the losses and weights as eager's, no op run eagerly."""
    monkeypatch.setenv("LAZY_MLIR_FUSED_ATTENTION", fused)
    c = assert_trains_like_eager(real_model("gpt2", "tiny", layers=1))
    counts = _counters(c)
    assert not [n for n in counts if n.startswith("aten::")], counts
    if fused == "1":
        assert counts.get("lazy::attention") == 3 and "lazy::_safe_softmax" not in counts
    else:
        assert "lazy::attention" not in counts and counts.get("lazy::_safe_softmax")


def test_the_decomposition_runs_on_vulkan(vulkan):
    """Plain aten ops after import (no host call): the causal forward and
    backward compile for the Vulkan target (lavapipe) and match eager."""
    assert _lazy_as_eager(None, True, None) == {"lazy::attention": 1}
