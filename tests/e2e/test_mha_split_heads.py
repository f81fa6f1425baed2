"""``nn.MultiheadAttention``'s self-attention on the lazy device with its heads
split by one view and one permute (``lazy/mha.py``), against eager PyTorch:
outputs and gradients for each mask form and layout, fewer recorded ops than
PyTorch's function, PyTorch's function for what is not taken (and with
``LAZY_MLIR_FUSED_MHA=0``), and the suite's encoder training like eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.lazy import mha as lazy_mha
from lazy_mlir.lazy import tensor as lazy_tensor
from lazy_mlir.models.real import real_model
from e2e_helpers import Counters, assert_trains_like_eager

L, B, E, H = 5, 2, 8, 2


def _module(batch_first: bool) -> nn.MultiheadAttention:
    torch.manual_seed(0)
    return nn.MultiheadAttention(E, H, batch_first=batch_first)


def _mask(kind):
    if kind == "causal":
        return nn.Transformer.generate_square_subsequent_mask(L)
    if kind == "float":
        return torch.randn(L, L, generator=torch.Generator().manual_seed(1))
    if kind == "bool":
        return torch.rand(L, L, generator=torch.Generator().manual_seed(1)) > 0.7
    return None


def _run(mha, x, mask, device, need_weights=False, **kwargs):
    """Output and the gradients of x and every weight, after a weighted sum
    (tensor keyword arguments, a key padding mask, go to ``device`` too)."""
    mha = mha.to(device)
    x = x.detach().to(device).requires_grad_()
    kwargs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    out, _ = mha(x, x, x, attn_mask=None if mask is None else mask.to(device),
                 need_weights=need_weights, **kwargs)
    (out * torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(device)
     .cos()).sum().backward()
    return [out, x.grad, *[p.grad for p in mha.parameters()]]


def _lazy_as_eager(batch_first, mask_kind, **kwargs) -> dict:
    """The lazy run's results are eager's; returns the mha counters it moved."""
    shape = (B, L, E) if batch_first else (L, B, E)
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    mask = _mask(mask_kind)
    expected = _run(_module(batch_first), x, mask, "cpu", **kwargs)
    c = Counters()
    actual = _run(_module(batch_first), x, mask, "lazy", **kwargs)
    lm.mark_step()
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5)
    return {n: c.delta(n) for n in lm.metrics.counter_names()
            if n.startswith(("lazy::mha", "mha_unfused::", "aten::")) and c.delta(n)}


@pytest.mark.parametrize("batch_first,mask_kind,causal", [
    (True, None, False), (False, None, False), (True, "causal", True), (False, "float", False),
    (True, "bool", False)])
def test_split_heads_as_eager(batch_first, mask_kind, causal):
    """(The module turns a boolean mask into a float one before the function.)"""
    assert _lazy_as_eager(batch_first, mask_kind, is_causal=causal) == {"lazy::mha": 1}


def test_attention_weights_take_pytorchs_function():
    assert _lazy_as_eager(True, None, need_weights=True) == {"mha_unfused::weights asked for": 1}


def test_a_key_padding_mask_takes_pytorchs_function():
    padding = torch.tensor([[False] * (L - 1) + [True]] * B)
    assert _lazy_as_eager(True, None, key_padding_mask=padding) == {
        "mha_unfused::key padding mask": 1}


def test_switched_off_records_pytorchs_views(monkeypatch):
    """The same call through PyTorch's function records over twice the ops."""
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(0)).to("lazy")
    mha = _module(True).to("lazy")

    def recorded(fused: str) -> int:
        monkeypatch.setenv("LAZY_MLIR_FUSED_MHA", fused)
        seen = []
        original = lazy_tensor.LazyTensor.__torch_dispatch__.__func__

        def spy(cls, func, types, args=(), kwargs=None):
            seen.append(func)
            return original(cls, func, types, args, kwargs)
        monkeypatch.setattr(lazy_tensor.LazyTensor, "__torch_dispatch__", classmethod(spy))
        mha(x, x, x, need_weights=False)
        monkeypatch.undo()
        return len(seen)
    fused, unfused = recorded("1"), recorded("0")
    assert fused <= 12 and 2 * fused <= unfused, (fused, unfused)


def test_unfused_reasons():
    x = torch.randn(L, B, E).to("lazy")
    mha = _module(False).to("lazy")
    w, b, ow, ob = mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias

    def reason(query=x, key=None, value=None, **kw):
        args = dict(num_heads=H, in_proj_weight=w, in_proj_bias=b, bias_k=None, bias_v=None,
                    add_zero_attn=False, out_proj_weight=ow, out_proj_bias=ob,
                    key_padding_mask=None, need_weights=False, attn_mask=None,
                    use_separate_proj_weight=False, static_k=None, static_v=None,
                    is_causal=False)
        args.update(kw)
        key = query if key is None else key
        return lazy_mha.unfused_reason(query, key, key if value is None else value, **args)
    assert reason() is None
    assert reason(query=x.cpu()) == "not all lazy"
    assert reason(key=x + 1) == "not self attention"
    assert reason(use_separate_proj_weight=True) == "separate projections"
    assert reason(add_zero_attn=True) == "extra keys"
    assert reason(query=x[:, 0]) == "shapes"
    assert reason(num_heads=3) == "shapes"
    assert reason(attn_mask=torch.zeros(B * H, L, L, device="lazy")) == "mask"
    assert reason(attn_mask=torch.zeros(L, L, dtype=torch.bool, device="lazy")) == "mask"
    assert reason(attn_mask=torch.zeros(L, L, device="lazy"), is_causal=True) is None
    assert reason(is_causal=True) == "causal without a mask"


def test_eager_tensors_keep_pytorchs_function():
    """The wrapper is transparent for CPU tensors: same results, no counter."""
    x, mha = torch.randn(B, L, E), _module(True)
    c = Counters()
    out = mha(x, x, x, need_weights=False)[0]
    seq_first = x.transpose(0, 1)
    expected = lazy_mha._original(
        seq_first, seq_first, seq_first, E, H, mha.in_proj_weight, mha.in_proj_bias, None, None,
        False, 0.0, mha.out_proj.weight, mha.out_proj.bias, need_weights=False)[0]
    torch.testing.assert_close(out, expected.transpose(0, 1))
    assert not [n for n in lm.metrics.counter_names() if "mha" in n and c.delta(n)]


@pytest.mark.slow  # (44 s in CI; the split heads are checked op by op above)
def test_encoder_trains_like_eager():
    """The suite's tiny ``nn.TransformerEncoder`` (2 layers), 3 AdamW steps:
    eager's losses and weights, every attention call taken, no op run eagerly."""
    c = assert_trains_like_eager(real_model("transformer", "tiny"))
    counts = {n: c.delta(n) for n in lm.metrics.counter_names() if c.delta(n)}
    assert counts.get("lazy::mha") == 6 and not [n for n in counts if n.startswith(
        ("mha_unfused::", "aten::"))], counts


def test_the_wrapper_has_pytorchs_signature():
    """Installed with the device, and only over the function it was written for."""
    assert F.multi_head_attention_forward is lazy_mha.multi_head_attention_forward
    assert lazy_mha._parameters(lazy_mha._original) == lazy_mha._parameters(
        F.multi_head_attention_forward)


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_gets_pytorchs_function(tmp_path):
    """A scripted encoder layer compiles, runs and saves as without the wrapper."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, 16, dropout=0.0, batch_first=True)
    x = torch.randn(B, L, E)
    scripted = torch.jit.script(layer)
    torch.jit.save(scripted, tmp_path / "layer.pt")
    loaded = torch.jit.load(tmp_path / "layer.pt")
    torch.testing.assert_close(loaded(x), layer(x))
