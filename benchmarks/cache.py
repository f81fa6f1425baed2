"""The persistent compiled-module cache: cold and warm first-step latency of
the LTC tutorial CNN, and the host overhead of a cache-hit step.

    python benchmarks/cache.py [--batch B] [--steps N]

Cold: a fresh process and an empty cache directory (trace, lower, IREE
compile, run). Warm: a second fresh process on the same directory (trace, load
from disk, run). Host overhead on a hit: trace + graph key + lookup + launch,
measured as the time until mark_step returns, against the whole step.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

WORKER = r"""
import json, statistics, sys, time
import torch, torch.nn.functional as F
import lazy_mlir as lm
from lazy_mlir.models.seed import MnistCNN
batch, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = MnistCNN(dropout=False).to("lazy")
opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
first, host, total = None, [], []
for i in range(steps):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    F.nll_loss(model(x.to("lazy")), y.to("lazy")).backward()
    opt.step()
    lm.mark_step()
    t1 = time.perf_counter()
    lm.wait_device_ops()
    t2 = time.perf_counter()
    if i == 0:
        first = t2 - t0
    elif i >= 2:
        host.append(t1 - t0)
        total.append(t2 - t0)
print(json.dumps({"first": first, "host": statistics.median(host),
                  "step": statistics.median(total),
                  "uncached": lm.metrics.counter_value("UncachedCompile"),
                  "disk_hits": lm.metrics.counter_value("PersistentCacheHit")}))
"""


def run(cache_dir, batch, steps):
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", WORKER, str(batch), str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cold = run(d, args.batch, args.steps)
        warm = run(d, args.batch, args.steps)
    print(f"| MNIST CNN, batch {args.batch} | cold cache | warm cache |")
    print("|---|---|---|")
    print(f"| first step (ms) | {cold['first'] * 1e3:.0f} | {warm['first'] * 1e3:.0f} |")
    print(f"| compiles (UncachedCompile) | {cold['uncached']} | {warm['uncached']} |")
    print(f"| modules loaded from disk | {cold['disk_hits']} | {warm['disk_hits']} |")
    print(f"| steady step, median (ms) | {cold['step'] * 1e3:.1f} | {warm['step'] * 1e3:.1f} |")
    share = warm["host"] / warm["step"]
    print(f"| host overhead on a hit: trace + key + lookup + launch (ms) | "
          f"{cold['host'] * 1e3:.1f} | {warm['host'] * 1e3:.1f} ({share:.0%} of the step) |")


if __name__ == "__main__":
    main()
