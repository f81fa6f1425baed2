"""The compute floor of a training step: its FLOPs at the host's best GEMM rate.

    python benchmarks/_roofline.py --peak              # {"gflops_per_core": ..., ...}
    python benchmarks/_roofline.py --flops gpt2-medium  # {"gflop": ...}

At the medium size the suite's steps are matmuls (``dispatch_profile.py``:
70-80% of a transformer step's module), so no backend that computes in
float32, as eager does, can run a step faster than its FLOPs at the best
matmul rate this host reaches. ``real_models.py`` prints that floor beside
eager's time: a ratio goal below the floor cannot be met on the host, one
above it says how much is left to win.

- FLOPs: one eager step (forward, backward, AdamW) under PyTorch's
  ``FlopCounterMode``, with oneDNN off so that the LSTM runs as its matmuls
  (the counter has no formula for oneDNN's fused RNN kernel, and the
  matmuls are the same multiply-adds). Elementwise work is not counted: the
  floor is a lower bound.
- Rate: the best float32 matmul rate on one thread over the medium
  transformers' matmul shapes and a 2048^3 one, of IREE's cpu target (its
  ``mmt4d`` microkernel) and PyTorch's BLAS, in process CPU time (steady on
  a loaded machine, where wall time is not), times the cores the step runs
  on. On a Zen 4 host IREE reached 105 GFLOP/s a core on the medium shapes
  and 76 on 2048^3 (PyTorch: 95 and 90).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PEAK_SHAPES = ("2048x2048x2048",)  # beside matmul_kernels.DEFAULT_SHAPES


def step_gflop(rm) -> float:
    """GFLOP of one eager training step of the suite model ``rm``."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    model = rm.make()
    opt = rm.optimizer(model)
    batch = rm.batch(0)

    def step():
        opt.zero_grad(set_to_none=True)
        rm.loss(model, batch).backward()
        opt.step()

    step()  # AdamW's state is made on the first step
    with torch.backends.mkldnn.flags(enabled=False), FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops() / 1e9


def gemm_peak(reps: int = 3) -> dict:
    """The best one-thread float32 GEMM rate (GFLOP/s) of IREE and PyTorch:
    ``gflops_per_core``, ``by`` (which one, on which shape) and every rate."""
    import matmul_kernels as mk
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape in (*mk.DEFAULT_SHAPES.split(","), *PEAK_SHAPES):
            m, n, k = (int(d) for d in shape.split("x"))
            gflop = 2 * m * n * k / 1e9
            iree_cpu_ms, _ = mk.iree_ms(m, n, k, "NN", mk.cpu_flags(), 1, reps, Path(tmp))
            torch_cpu_ms, _ = mk.torch_ms(m, n, k, "NN", 1, reps)
            rates[f"iree {shape}"] = gflop / iree_cpu_ms * 1e3
            rates[f"torch {shape}"] = gflop / torch_cpu_ms * 1e3
    best = max(rates, key=rates.get)
    return {"gflops_per_core": rates[best], "by": best, "rates": rates}


def floor_ms(gflop: float, peak: dict, cores: int) -> float:
    """The step's time at ``peak`` on ``cores`` cores, in milliseconds."""
    return gflop / (peak["gflops_per_core"] * cores) * 1e3


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--peak", action="store_true", help="the host's one-thread GEMM rate")
    what.add_argument("--flops", metavar="MODEL-SIZE", help="a suite model's step, e.g. bert-tiny")
    a = p.parse_args(argv)
    if a.peak:
        out = gemm_peak()
    else:
        import _harness as H
        name, size = a.flops.rsplit("-", 1)
        out = {"gflop": step_gflop(H.zoo_module("real.py").real_model(name, size))}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
