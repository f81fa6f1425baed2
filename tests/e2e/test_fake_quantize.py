"""Fake quantization (``ops/fake_quantize.py``): PyTorch has no meta kernel
for it, so every call ran eagerly (a host round trip per quantized layer and
step, with a wrong reason printed: "output shape depends on the data"). Now
captured as the CPU kernels' formula, with eager's bits, special values
included."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.ao.quantization as tq

import lazy_mlir as lm
from e2e_helpers import Counters

aten = torch.ops.aten


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(32, 8) * 30
    x[0, :6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 3e37, -3e37, 0.05])
    x[1, :3] = torch.tensor([0.15, -0.25, 12.75])  # halfway cases: round half to even
    return x


def _same(want, got):
    for w, g in zip(want, got):
        g = g.cpu()
        assert w.dtype == g.dtype and torch.equal(w.isnan(), g.isnan())
        assert torch.equal(w.nan_to_num(), g.nan_to_num())


CALLS = {
    "per_tensor": lambda t, x: aten.fake_quantize_per_tensor_affine_cachemask(
        x, 0.037, 5, 0, 255),
    "per_tensor_qparams": lambda t, x: aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
        x, t(torch.tensor([0.1])), t(torch.tensor([3], dtype=torch.int32)),
        t(torch.tensor([1], dtype=torch.uint8)), -128, 127),
    "per_tensor_qparams_off": lambda t, x: aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams(
        x, t(torch.tensor([0.1])), t(torch.tensor([3], dtype=torch.int32)),
        t(torch.tensor([0], dtype=torch.uint8)), -128, 127),
    "per_channel": lambda t, x: aten.fake_quantize_per_channel_affine_cachemask(
        x, t(torch.linspace(0.01, 0.2, 8)), t(torch.arange(-4, 4, dtype=torch.int32)), 1, -128, 127),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_fake_quantize_gives_eagers_bits_without_falling_back(name):
    c = Counters()
    x = _inputs()
    want = CALLS[name](lambda t: t, x)
    got = CALLS[name](lambda t: t.to("lazy"), x.to("lazy"))
    _same(want, got)
    assert c.fell_back() == []


def test_a_float64_input_falls_back_with_eagers_values():
    x = torch.randn(4, dtype=torch.float64)
    got = aten.fake_quantize_per_tensor_affine_cachemask(x.to("lazy"), 0.1, 0, 0, 255)
    _same(aten.fake_quantize_per_tensor_affine_cachemask(x, 0.1, 0, 0, 255), got)
    assert lm.metrics.counter_value("aten::fake_quantize_per_tensor_affine_cachemask") >= 1


def test_the_fallback_reason_tells_a_missing_meta_kernel_from_a_data_dependent_shape():
    from lazy_mlir.lazy.shapes import no_shape_reason
    reasons = []
    for call in (lambda: aten.fake_quantize_per_tensor_affine_cachemask(
            torch.ones(3, device="meta"), 0.1, 0, 0, 255),
            lambda: aten.nonzero(torch.ones(3, device="meta"))):
        with pytest.raises(NotImplementedError) as e:
            call()
        reasons.append(no_shape_reason(e.value))
    assert reasons == ["PyTorch has no shape function (meta kernel) for it",
                       "output shape depends on the data (NotImplementedError)"]


def test_quantization_aware_training_with_fake_quantize_modules():
    """``torch.ao.quantization.FakeQuantize`` (a moving-average observer and
    the tensor-qparams op) on activations and weights trains as eagerly."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), tq.FakeQuantize(), torch.nn.ReLU(),
                                torch.nn.Linear(16, 4), tq.FakeQuantize())
    lazy = copy.deepcopy(model).to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, lazy)]
    c = Counters()
    for _ in range(3):
        x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))
        losses = []
        for m, opt, dev in ((model, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            loss = torch.nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            opt.zero_grad()
            lm.mark_step()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) < 1e-5
    assert c.fell_back() == []
    torch.testing.assert_close(lazy[0].weight.cpu(), model[0].weight, rtol=1e-5, atol=1e-6)
