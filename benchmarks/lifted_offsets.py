"""Static against lifted view offsets (``lazy/offsets.py``): what a runtime
start costs a module whose slice feeds a matmul.

    python benchmarks/lifted_offsets.py [--rounds R] [--steps N]

Each case runs as two modules: ``static`` (``LAZY_MLIR_LIFT_INTS=0``: the start
a constant, IREE's static offsets) and ``lifted`` (the start a 0-dim graph
input), each step at the same start so both are one module. Rounds alternate
the two (a loaded machine slows both alike); per mode, the median over rounds
of each round's median step (capture + launch + run + wait) and of the
module's run (``ExecuteTime``: inputs moved in and the module called).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import lazy_mlir as lm


def _cases():
    torch.manual_seed(0)
    rows, w = torch.randn(2048, 512), torch.randn(512, 512)
    cols, w2 = torch.randn(512, 2048), torch.randn(256, 512)
    return {
        "rows: x[i:i+256] @ w (2048x512, 512x512)": (lambda d, i: d[i:i + 256] @ w_l, rows, w),
        "cols: x[:, j:j+256] @ w (512x2048, 256x512)": (lambda d, i: d[:, i:i + 256] @ w_l, cols, w2),
        "rows, elementwise: (x[i:i+256] * 2).sum(0)": (lambda d, i: (d[i:i + 256] * 2).sum(0),
                                                     rows, w),
    }


w_l = None


def _round(fn, data, steps: int, start: int) -> tuple[float, float]:
    """(median step, median module run) of ``steps`` steps, in seconds."""
    times = []
    before = lm.metrics.metric_data("ExecuteTime")[0]
    for _ in range(steps):
        t0 = time.perf_counter()
        out = fn(data, start)  # (kept: mark_step computes live tensors)
        lm.mark_step()
        lm.wait_device_ops()
        times.append(time.perf_counter() - t0)
    del out
    runs = lm.metrics.metric_data("ExecuteTime")[2][before:]
    return statistics.median(times), statistics.median(runs)


def main() -> None:
    global w_l
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| case | step static ms | step lifted ms | lifted / static "
          "| run static ms | run lifted ms | lifted / static |")
    print("|---|---|---|---|---|---|---|")
    for name, (fn, data, w) in _cases().items():
        d, w_l = data.to("lazy"), w.to("lazy")
        got = {"static": ([], []), "lifted": ([], [])}
        for r in range(args.rounds + 1):  # round 0 compiles both: not counted
            for mode in ("static", "lifted") if r % 2 else ("lifted", "static"):
                os.environ["LAZY_MLIR_LIFT_INTS"] = "0" if mode == "static" else "1"
                step, run = _round(fn, d, args.steps, 128)
                if r:
                    got[mode][0].append(step)
                    got[mode][1].append(run)
        (s_step, s_run), (l_step, l_run) = ((statistics.median(x) * 1e3 for x in got[m])
                                            for m in ("static", "lifted"))
        print(f"| {name} | {s_step:.3f} | {l_step:.3f} | {l_step / s_step:.2f}x | {s_run:.3f} "
              f"| {l_run:.3f} | {l_run / s_run:.2f}x |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")

if __name__ == "__main__":
    main()
