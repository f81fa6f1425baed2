"""float16 and bfloat16 reductions, norms, softmax, composite activations
and losses compute in float32 and round once, as eager's CPU kernels do
(``ops/narrow_opmath.py``): compared with eager bit for bit, and a bf16
model's training losses are eager's."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import lazy, train_steps

# (layer_norm is within an ulp: its float32 rsqrt is not eager's to the last
# bit, so a float16 rounding may fall the other way, as before)
_OPS = {
    "sum": lambda t: t.sum(-1), "mean": lambda t: t.mean(), "norm": lambda t: t.norm(dim=-1),
    "normalize": lambda t: F.normalize(t, dim=-1), "softmax": lambda t: t.softmax(-1),
    "cumsum": lambda t: t.cumsum(-1),
    "mse": lambda t: F.mse_loss(t, t.flip(0)), "silu": F.silu,
    "group_norm": lambda t: F.group_norm(t.reshape(4, 8, 16), 2),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_ops_round_once_as_eager(dtype):
    x = (torch.randn(32, 16, generator=torch.Generator().manual_seed(5)) * 2).to(dtype)
    got = {name: fn(lazy(x)) for name, fn in _OPS.items()}
    for name, fn in _OPS.items():
        torch.testing.assert_close(got[name].cpu(), fn(x), rtol=0, atol=0, msg=name)


def test_bf16_model_trains_with_eagers_losses():
    """A bf16 MLP with SGD momentum: its first loss was 1.3125 for eager's
    1.3046875 (the mean accumulated in bf16) and the momentum buffer drifted
    (``mul_(0.9)`` took 0.9 rounded to bf16)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 4)).bfloat16()
    x, y = torch.randn(8, 16).bfloat16(), torch.randn(8, 4).bfloat16()

    def train(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        # (not F.mse_loss: IREE fuses its sub and square and keeps the
        # difference unrounded, where eager rounds it to bf16 first)
        return train_steps(m, opt, [(x, y)] * 4, device, lambda out, t: ((out - t) ** 2).mean())
    assert train("lazy") == train("cpu")
