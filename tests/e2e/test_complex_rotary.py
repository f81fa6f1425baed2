"""Rotary position embeddings written with complex numbers compile and train
(``passes/complex_as_real``): LLaMA's and Mistral's reference code, DeepSeek
V2 and Llama 4 build ``freqs_cis`` with ``torch.polar`` and rotate q and k by
``view_as_real(view_as_complex(x.reshape(..., -1, 2)) * freqs_cis)``; the
backward multiplies by ``freqs_cis.conj()``. Each complex op ran eagerly
before (sweep hf/causal-lm/deepseek_v2: 70 fallback ops, mul, _conj and
polar, 20 eager graphs in 5 steps)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import Counters, lazy, same_as_eager, train_steps

import lazy_mlir as lm


def _freqs_cis(dim: int, positions: torch.Tensor) -> torch.Tensor:
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=positions.device).float() / dim))
    freqs = positions.float()[:, None] * inv
    return torch.polar(torch.ones_like(freqs), freqs)


def _as_complex(x):
    return torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))


class ComplexRotary(torch.nn.Module):
    """q and k projections rotated as the LLaMA reference code does; where
    ``freqs_cis`` comes from: a complex buffer moved with the model, made on
    the host and moved each step, or made on the device by ``torch.polar``."""

    def __init__(self, source: str, heads: int = 2, head_dim: int = 8, seq: int = 6):
        super().__init__()
        self.q = torch.nn.Linear(heads * head_dim, heads * head_dim)
        self.k = torch.nn.Linear(heads * head_dim, heads * head_dim)
        self.heads, self.head_dim, self.source = heads, head_dim, source
        if source == "buffer":
            self.register_buffer("freqs_cis", _freqs_cis(head_dim, torch.arange(seq)),
                                 persistent=False)

    def _freqs(self, x, s):
        if self.source == "buffer":
            return self.freqs_cis[:s]
        if self.source == "host":
            return _freqs_cis(self.head_dim, torch.arange(s)).to(x.device)
        return _freqs_cis(self.head_dim, torch.arange(s, device=x.device)) * 0.75

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim)
        k = self.k(x).view(b, s, self.heads, self.head_dim)
        fc = self._freqs(x, s).view(1, s, 1, self.head_dim // 2)
        q = torch.view_as_real(_as_complex(q) * fc).flatten(3).type_as(x)
        k = torch.view_as_real(_as_complex(k) * fc).flatten(3).type_as(x)
        return torch.einsum("bqhd,bkhd->bhqk", q, k).softmax(-1).pow(2).mean()


def _train(source: str, device: str, x: torch.Tensor, steps: int = 3):
    torch.manual_seed(0)
    model = ComplexRotary(source).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # (the model computes its loss from x alone: the batch's target goes unused)
    losses = train_steps(model, opt, [(x, x)] * steps, device, lambda loss, _: loss)
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("source", ["buffer", "host", "device_polar"])
def test_complex_rotary_trains_like_eager_without_falling_back(source):
    x = torch.randn(2, 6, 16)
    want_losses, want_params = _train(source, "cpu", x)
    c = Counters()
    losses, params = _train(source, "lazy", x)
    assert c.fell_back() == [] and c.delta("EagerGraph") == 0
    assert losses == pytest.approx(want_losses, rel=1e-5)
    for got, want in zip(params, want_params):
        # (AdamW's first steps move a weight by about lr whatever its
        # gradient's size, so a gradient near zero that rounds differently
        # moves it differently: 1e-5 of lr=1e-2 seen on weights near zero,
        # depending on which steps ran before their module was compiled)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_complex_values_live_across_graphs():
    """A complex result kept past ``mark_step`` (a cached ``freqs_cis``) is
    the next graph's complex input, and reads back as eager's values."""
    angles = torch.randn(4, 3)
    c = Counters()
    fc = torch.polar(lazy(torch.rand(4, 3)) + 0.5, lazy(angles))
    lm.mark_step()
    rotated = fc * lazy(torch.randn(4, 3, dtype=torch.complex64)).conj()
    lm.mark_step()
    assert fc.dtype == torch.complex64 and rotated.dtype == torch.complex64
    assert c.fell_back() == [] and c.delta("EagerGraph") == 0
    host = fc.cpu()
    torch.testing.assert_close(host.angle(), angles, rtol=1e-5, atol=1e-5)
    assert rotated.cpu().dtype == torch.complex64


@pytest.mark.parametrize("fn", [
    lambda x, y: torch.view_as_real(_as_complex(x) / (_as_complex(y) + 2.5)),
    lambda x, y: (_as_complex(x).abs(), _as_complex(y).angle(), _as_complex(x).real),
    lambda x, y: torch.view_as_real(torch.cat([_as_complex(x).transpose(0, 1),
                                               _as_complex(y).sum(0, keepdim=True)], 0)[1:]),
], ids=["division", "magnitude_angle_real", "transpose_sum_cat_slice"])
def test_complex_arithmetic_compiles(fn):
    c = Counters()
    same_as_eager(fn, torch.randn(3, 3, 4), torch.randn(3, 3, 4), no_fallback=True)
    assert c.delta("EagerGraph") == 0
