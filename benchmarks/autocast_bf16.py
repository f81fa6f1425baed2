"""bf16 autocast on the lazy device against eager CPU autocast, one small
model: ``lm.compile_train_step`` and the plain loop (forward under
``lm.autocast("lazy", dtype=torch.bfloat16)``, backward and optimizer step
outside, ``lm.mark_step()``) against eager PyTorch with the forward under
``torch.autocast("cpu", dtype=torch.bfloat16)``; and each one's float32
version, for the ratio autocast buys or costs.

    python benchmarks/autocast_bf16.py [--width 256] [--batch 64] [--steps 20] [--warmup 3]

Prints the median step time in milliseconds (minimum after a slash) of each
way, its loss after the last step (the losses of one dtype agree within bf16
tolerance), its speed against eager's and how many of compile_train_step's
calls were replays of its compiled graph. A compiled step is replayed only once two recordings agree
(the warm-up); its guard includes the autocast state.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm


def _model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.LayerNorm(width),
                         nn.Linear(width, width), nn.GELU(), nn.Linear(width, 10))


class _Autocast(nn.Module):
    """``model`` with its forward under ``region()`` (what a user writes
    around the forward; compile_train_step takes a module)."""

    def __init__(self, model, region):
        super().__init__()
        self.model, self.region = model, region

    def forward(self, x):
        with self.region():
            return self.model(x)


def _region(device: str, dtype):
    if dtype is None:
        return torch.autocast("cpu", enabled=False)
    return lm.autocast("lazy", dtype=dtype) if device == "lazy" else torch.autocast("cpu", dtype=dtype)


def _run(way: str, model, batches, dtype, warmup: int) -> tuple[list[float], float]:
    device = "cpu" if way == "eager" else "lazy"
    model = _Autocast(copy.deepcopy(model).to(device), lambda: _region(device, dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = F.cross_entropy
    step = lm.compile_train_step(model, loss_fn, opt) if way == "compiled" else None
    times, loss = [], None
    for i, (x, y) in enumerate(batches):
        x, y = x.to(device), y.to(device)
        t0 = time.perf_counter()
        if step is not None:
            loss = step(x, y)
        else:
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            if device == "lazy":
                lm.mark_step()
        value = loss.item()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times, value


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args(argv)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(a.batch, a.width, generator=g),
                torch.randint(0, 10, (a.batch,), generator=g))
               for _ in range(a.warmup + a.steps)]
    model = _model(a.width)
    print(f"width {a.width}, batch {a.batch}, {a.steps} steps after {a.warmup} warm-up")
    print(f"{'dtype':<10}{'way':<10}{'step ms (median/min)':>24}{'last loss':>12}{'vs eager':>10}"
          f"{'replayed':>10}")
    for name, dtype in (("float32", None), ("bf16", torch.bfloat16)):
        eager_median = None
        for way in ("eager", "plain", "compiled"):
            replayed = lm.metrics.counter_value("TrainStepReplayed")
            times, loss = _run(way, model, batches, dtype, a.warmup)
            replayed = lm.metrics.counter_value("TrainStepReplayed") - replayed
            median = statistics.median(times) * 1e3
            eager_median = eager_median or median
            print(f"{name:<10}{way:<10}{median:>15.2f} / {min(times) * 1e3:<6.2f}"
                  f"{loss:>12.4f}{eager_median / median:>9.2f}x{replayed:>10}")


if __name__ == "__main__":
    main()
