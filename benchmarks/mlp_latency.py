"""First-compile and cached-run latency of a 3-layer MLP forward.

    python benchmarks/mlp_latency.py [--batch B] [--runs N]

First compile: the first forward + mark_step + read in a fresh process
(trace, lower, IREE compile, run). Cached run: the same forward again (trace,
cache hit, run, read). Eager PyTorch's forward is timed in the same run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

import lazy_mlir as lm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    x = torch.randn(args.batch, 784)
    import copy
    lazy_model = copy.deepcopy(model).to("lazy")

    def lazy_forward():
        with torch.no_grad():
            out = lazy_model(x.to("lazy"))
        lm.mark_step()
        return out.cpu()

    t0 = time.perf_counter()
    first = lazy_forward()
    first_s = time.perf_counter() - t0
    with torch.no_grad():
        torch.testing.assert_close(first, model(x), rtol=1e-4, atol=1e-4)
    cached = []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        lazy_forward()
        cached.append(time.perf_counter() - t0)
    eager = []
    with torch.no_grad():
        for _ in range(args.runs):
            t0 = time.perf_counter()
            model(x)
            eager.append(time.perf_counter() - t0)
    assert lm.metrics.counter_value("UncachedCompile") == 1
    print("| 3-layer MLP forward, batch %d | latency |" % args.batch)
    print("|---|---|")
    print(f"| first call (trace + compile + run) | {first_s * 1e3:.0f} ms |")
    print(f"| cached call, median of {args.runs} | {statistics.median(cached) * 1e3:.3f} ms |")
    print(f"| cached call, min | {min(cached) * 1e3:.3f} ms |")
    print(f"| eager PyTorch forward, median | {statistics.median(eager) * 1e3:.3f} ms |")


if __name__ == "__main__":
    main()
