"""compile_train_step over a step that draws random numbers with
``torch.rand`` on the lazy device (stochastic depth: timm's and
transformers' ``drop_path``, in Swin, ConvNeXt, BEiT...). The fill is drawn
on the host from PyTorch's CPU generator; the replay draws it anew, in the
recording's order (``random.again``), so the step replays (it ran plain:
two recordings differed in the drawn values) with eager's numbers."""
from __future__ import annotations

import torch
import torch.nn as nn

import lazy_mlir as lm
from e2e_helpers import train_steps


class _DropPath(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x, y):
        keep = (torch.rand(x.shape[0], 1, dtype=x.dtype, device=x.device) + 0.7).floor()
        h = x + self.a(x) * keep / 0.7
        return nn.functional.cross_entropy(self.b(h), y)


def _batch(i):
    g = torch.Generator().manual_seed(i)
    return torch.randn(6, 8, generator=g), torch.randint(0, 3, (6,), generator=g)


def _losses(lazy: bool):
    model = _DropPath()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=lazy)
    if lazy:
        model = model.to("lazy")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, capturable=True)
        step = lm.compile_train_step(model, opt)
    torch.manual_seed(5)
    batches = [_batch(i) for i in range(6)]
    if not lazy:
        return train_steps(model, opt, batches, "cpu", None)
    return [step(x.to("lazy"), y.to("lazy")).item() for x, y in batches]


def test_a_step_drawing_with_rand_replays_with_eagers_numbers():
    before = lm.metrics.counter_value("TrainStepReplayed")
    lazy = _losses(True)
    assert lm.metrics.counter_value("TrainStepReplayed") - before == 3
    torch.testing.assert_close(torch.tensor(lazy), torch.tensor(_losses(False)),
                               rtol=1e-4, atol=1e-5)
