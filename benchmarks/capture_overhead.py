"""Capture overhead: host time per captured op, without compiling or running.

    python benchmarks/capture_overhead.py [--repeat N]

Times the capture of (1) a chain of 200 elementwise ops on a small tensor and
(2) the LTC tutorial CNN's whole training step (forward, backward, Adadelta),
and prints microseconds per captured op next to eager PyTorch's time per op
for the same chain.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.models.seed import MnistCNN


def _ops_captured() -> int:
    return sum(lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
               if n.startswith("lazy::"))


def chain(x, n=200):
    for i in range(n // 2):
        x = x * 1.0001
        x = x.relu()
    return x


def time_capture(fn, repeat):
    """(median seconds per call, ops per call); pending graphs are dropped."""
    times, ops = [], 0
    for _ in range(repeat):
        lm.metrics.reset()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        ops = _ops_captured()
        lm.mark_step()
        lm.wait_device_ops()
    return statistics.median(times[1:]), ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=8)
    args = ap.parse_args()

    x_lazy = torch.randn(16).to("lazy")
    x_cpu = torch.randn(16)
    chain_s, chain_ops = time_capture(lambda: chain(x_lazy), args.repeat)
    eager = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        chain(x_cpu)
        eager.append(time.perf_counter() - t0)
    eager_s = statistics.median(eager[1:])

    torch.manual_seed(0)
    model = MnistCNN(dropout=False).to("lazy")
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    data, target = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(data.to("lazy")), target.to("lazy")).backward()
        opt.step()

    step_s, step_ops = time_capture(step, args.repeat)
    print("| workload | ops captured | capture time | per op | eager per op |")
    print("|---|---|---|---|---|")
    print(f"| 200-op elementwise chain | {chain_ops} | {chain_s * 1e3:.2f} ms | "
          f"{chain_s / chain_ops * 1e6:.1f} us | {eager_s / 200 * 1e6:.1f} us |")
    print(f"| MNIST CNN training step | {step_ops} | {step_s * 1e3:.2f} ms | "
          f"{step_s / step_ops * 1e6:.1f} us | |")


if __name__ == "__main__":
    main()
