"""IREE's cpu matmuls against PyTorch's (oneDNN/MKL), one matmul at a time.

    python benchmarks/matmul_kernels.py [--threads 1] [--shapes 1024x2048x512,...]
        [--kinds NN,NT,TN] [--flag=--iree-llvmcpu-enable-ukernels=none ...] [--reps 5]

At the medium size the transformer models' step is compute-bound and most of
its time is matmuls (``benchmarks/dispatch_profile.py`` on a dumped step), so
the speed of one matmul, IREE's against eager's, bounds the whole step. Each
matmul is written as torch-mlir lowers ``aten.mm`` (a ``linalg.matmul``, with
an explicit ``linalg.transpose`` for a transposed operand: NT is ``a @ b.t()``,
the input gradient of a linear layer; TN is ``a.t() @ b``, its weight
gradient), compiled with the cpu target's flags (``lazy_mlir.targets``) plus
``--flag``, and timed with ``iree-benchmark-module`` (``local-sync`` for one
thread, else ``--threads`` local-task workers); PyTorch runs the same product
with ``torch.set_num_threads(threads)``.

Both columns are **process CPU time** per matmul (median of ``--reps``): on a
shared, loaded machine wall time swings several-fold while CPU time on one
thread stays within ~10-15%. With ``--threads 1`` it is the kernels' own
speed; the default shapes are the medium suite's (hidden 512, MLP 2048,
batch x sequence 1024).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _iree_bench import MS_PER_UNIT, cpu_flags  # (beside this file)

# M x N x K of the medium GPT-2/BERT/encoder step: QKV, attention output,
# MLP up and down (forward, NN); their input gradients (NT) and weight
# gradients (TN) have the same three sizes in another order.
DEFAULT_SHAPES = "1024x1536x512,1024x512x512,1024x2048x512,1024x512x2048"


def matmul_mlir(m: int, n: int, k: int, kind: str) -> tuple[str, list[str]]:
    """(linalg text, iree-benchmark-module ``--input`` values) of one matmul."""
    a = f"{k}x{m}xf32" if kind == "TN" else f"{m}x{k}xf32"
    b = f"{n}x{k}xf32" if kind == "NT" else f"{k}x{n}xf32"
    lines, lhs, rhs = [], "%a", "%b"
    if kind == "TN":
        lines.append(f"  %ta0 = tensor.empty() : tensor<{m}x{k}xf32>\n"
                     f"  %ta = linalg.transpose ins(%a : tensor<{a}>) outs(%ta0 : "
                     f"tensor<{m}x{k}xf32>) permutation = [1, 0]")
        lhs = "%ta"
    if kind == "NT":
        lines.append(f"  %tb0 = tensor.empty() : tensor<{k}x{n}xf32>\n"
                     f"  %tb = linalg.transpose ins(%b : tensor<{b}>) outs(%tb0 : "
                     f"tensor<{k}x{n}xf32>) permutation = [1, 0]")
        rhs = "%tb"
    out = f"tensor<{m}x{n}xf32>"
    text = "\n".join([
        f"func.func @main(%a: tensor<{a}>, %b: tensor<{b}>) -> {out} {{",
        "  %zero = arith.constant 0.0 : f32", *lines,
        f"  %e = tensor.empty() : {out}",
        f"  %f = linalg.fill ins(%zero : f32) outs(%e : {out}) -> {out}",
        f"  %r = linalg.matmul ins({lhs}, {rhs} : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) "
        f"outs(%f : {out}) -> {out}",
        f"  return %r : {out}", "}", ""])
    return text, [f"{a}=1", f"{b}=1"]


def iree_ms(m, n, k, kind, flags, threads, reps, tmp: Path) -> tuple[float, float]:
    """(CPU ms, wall ms) medians of one matmul compiled with ``flags``."""
    text, inputs = matmul_mlir(m, n, k, kind)
    src, vmfb = tmp / f"{kind}_{m}x{n}x{k}.mlir", tmp / f"{kind}_{m}x{n}x{k}.vmfb"
    src.write_text(text)
    subprocess.run(["iree-compile", str(src), *flags, "-o", str(vmfb)], check=True)
    # One thread: local-sync runs the dispatches on the calling thread. On
    # local-task the caller also spins while it waits for the worker, which
    # is 40% of the process's CPU for a 10 ms matmul (perf, cpu-clock).
    device = ["--device=local-sync"] if threads == 1 else [
        "--device=local-task", f"--task_topology_group_count={threads}"]
    out = subprocess.run(
        ["iree-benchmark-module", f"--module={vmfb}", *device, "--function=main",
         *[f"--input={i}" for i in inputs], "--benchmark_min_time=0.5s",
         f"--benchmark_repetitions={reps}", "--benchmark_format=json"],
        capture_output=True, text=True, check=True).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") != "aggregate"]
    scale = MS_PER_UNIT
    return (statistics.median(b["cpu_time"] * scale[b["time_unit"]] for b in runs),
            statistics.median(b["real_time"] * scale[b["time_unit"]] for b in runs))


def torch_ms(m, n, k, kind, threads, reps) -> tuple[float, float]:
    """(CPU ms, wall ms) medians of the same product in eager PyTorch."""
    import torch
    torch.set_num_threads(threads)
    a = torch.randn(k, m).t() if kind == "TN" else torch.randn(m, k)
    b = torch.randn(n, k).t() if kind == "NT" else torch.randn(k, n)
    for _ in range(3):
        a @ b
    cpu, wall = [], []
    for _ in range(reps):
        c0, t0, calls = time.process_time(), time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.3:
            a @ b
            calls += 1
        cpu.append((time.process_time() - c0) / calls * 1e3)
        wall.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(cpu), statistics.median(wall)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK,... (comma-separated)")
    p.add_argument("--kinds", default="NN,NT,TN", help="of NN, NT (b transposed), TN (a transposed)")
    p.add_argument("--threads", type=int, default=1, help="IREE workers and torch threads")
    p.add_argument("--reps", type=int, default=5, help="repetitions (medians)")
    p.add_argument("--flag", action="append", default=[], help="one more iree-compile flag")
    a = p.parse_args(argv)
    flags = cpu_flags() + a.flag
    print(f"iree-compile {' '.join(flags)}; {a.threads} thread(s); process CPU ms, "
          f"medians of {a.reps}\n")
    print("| matmul | MxNxK | IREE cpu ms | GFLOP/s | torch cpu ms | GFLOP/s | IREE/torch |")
    print("|---|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(","):
            m, n, k = (int(d) for d in shape.split("x"))
            gflop = 2 * math.prod((m, n, k)) / 1e9
            for kind in a.kinds.split(","):
                ic, _ = iree_ms(m, n, k, kind, flags, a.threads, a.reps, Path(tmp))
                tc, _ = torch_ms(m, n, k, kind, a.threads, a.reps)
                print(f"| {kind} | {shape} | {ic:.2f} | {gflop / ic * 1e3:.0f} | {tc:.2f} | "
                      f"{gflop / tc * 1e3:.0f} | {ic / tc:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
