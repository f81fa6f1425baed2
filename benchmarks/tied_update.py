"""The optimizer's update written into its inputs' buffers (IREE's
``iree.abi.output``) against into new ones, as lazy-mlir's step modules do
today, on the cpu target; and eager PyTorch's fused AdamW on the same tensors.

    python benchmarks/tied_update.py [--tensors 12] [--numel 1048576] [--rounds 5]

Each module runs ``--tensors`` AdamW updates of ``--numel`` float32 elements:
the ``linalg.generic`` lazy-mlir lowers ``_fused_adamw_`` to (copied from the
medium ViT's ``compile_train_step`` module, one dispatch a tensor). It reads
the parameter, its gradient and both moments and writes the parameter and
both moments: 28 bytes an element. ``untied`` returns the three as new
tensors (new buffers every call); ``tied`` declares each result written into
the buffer of the argument it replaces. Both are compiled with the cpu
target's flags and timed with ``iree-benchmark-module`` (2 threads,
``host_memory``'s malloc settings), alternated ``--rounds`` times.

Why: the step modules' optimizer dispatches ran at ~20 GB/s (ViT medium: 18.6
ms a step, 1.3-1.4 ms for a 512x2048 weight), eager's fused AdamW at the
host's memory bandwidth (~55 GB/s). Writing into new buffers reads each
output line before writing it and leaves the inputs' lines dead in the cache.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _iree_bench import cpu_flags, main_ms  # (beside this file)

BYTES_PER_ELEMENT = 28  # read p, grad, exp_avg, exp_avg_sq; write p, exp_avg, exp_avg_sq
SCALARS = ("decay", "step_size", "bias2_sqrt")

_BODY = """  %r{i}:3 = linalg.generic {{indexing_maps = [#v, #s, #s, #v, #v, #v, #s, #v, #v, #v], iterator_types = ["parallel"]}}
      ins(%p{i}, %decay, %step_size, %m{i}, %g{i}, %q{i}, %bias2_sqrt : {T}, tensor<f32>, tensor<f32>, {T}, {T}, {T}, tensor<f32>)
      outs(%e{i}, %e{i}, %e{i} : {T}, {T}, {T}) {{
  ^bb0(%x_p: f32, %x_decay_: f32, %x_step: f32, %x_m: f32, %x_g: f32, %x_q: f32, %x_b2: f32, %x_o0: f32, %x_o1: f32, %x_o2: f32):
    %x_g2 = arith.mulf %x_g, %x_g : f32
    %x_g2s = arith.mulf %x_g2, %c_1m_beta2 : f32
    %x_qs = arith.mulf %x_q, %c_beta2 : f32
    %x_q1 = arith.addf %x_qs, %x_g2s : f32
    %x_d = arith.subf %x_g, %x_m : f32
    %x_ds = arith.mulf %x_d, %c_1m_beta1 : f32
    %x_m1 = arith.addf %x_m, %x_ds : f32
    %x_sq = math.sqrt %x_q1 : f32
    %x_den0 = arith.divf %x_sq, %x_b2 : f32
    %x_den = arith.addf %x_den0, %c_eps : f32
    %x_num = arith.mulf %x_step, %x_m1 : f32
    %x_upd = arith.divf %x_num, %x_den : f32
    %x_pd = arith.mulf %x_p, %x_decay_ : f32
    %x_p1 = arith.addf %x_pd, %x_upd : f32
    linalg.yield %x_q1, %x_m1, %x_p1 : f32, f32, f32
  }} -> ({T}, {T}, {T})
"""


def update_mlir(tensors: int, numel: int, tied: bool) -> str:
    """``main(p0, m0, g0, q0, p1, ..., decay, step_size, bias2_sqrt)`` ->
    (exp_avg_sq, exp_avg, param) per tensor, in that order."""
    t = f"tensor<{numel}xf32>"
    args, results, body = [], [], []
    for i in range(tensors):
        for j, name in enumerate(("p", "m", "g", "q")):
            out = {"q": 0, "m": 1, "p": 2}.get(name)
            attr = (f" {{iree.abi.output = {3 * i + out} : index}}"
                    if tied and out is not None else "")
            args.append(f"%{name}{i}: {t}{attr}")
        body.append(f"  %e{i} = tensor.empty() : {t}\n" + _BODY.format(i=i, T=t))
        results += [f"%r{i}#0", f"%r{i}#1", f"%r{i}#2"]
    args += [f"%{s}: tensor<f32>" for s in SCALARS]
    types = ", ".join([t] * 3 * tensors)
    consts = "".join(f"  %c_{n} = arith.constant {v} : f32\n" for n, v in (
        ("beta2", "0.999"), ("1m_beta2", "0.001"), ("1m_beta1", "0.1"), ("eps", "1.0e-08")))
    return ("#v = affine_map<(d0) -> (d0)>\n#s = affine_map<(d0) -> ()>\n"
            f"func.func @main({', '.join(args)}) -> ({types}) {{\n{consts}{''.join(body)}"
            f"  return {', '.join(results)} : {types}\n}}\n")


def eager_ms(tensors: int, numel: int) -> float:
    """Median wall ms of ``torch.optim.AdamW(fused=True).step()`` on the same tensors."""
    import torch
    torch.set_num_threads(2)
    params = [torch.randn(numel) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn(numel)
    opt = torch.optim.AdamW(params, fused=True)
    opt.step()
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tensors", type=int, default=12)
    p.add_argument("--numel", type=int, default=1 << 20)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args(argv)
    flags = cpu_flags()
    gbytes = BYTES_PER_ELEMENT * a.tensors * a.numel / 1e9
    times: dict[str, list[float]] = {"untied": [], "tied": [], "eager fused AdamW": []}
    with tempfile.TemporaryDirectory() as tmp:
        vmfbs = {}
        for kind in ("untied", "tied"):
            src, vmfb = Path(tmp) / f"{kind}.mlir", Path(tmp) / f"{kind}.vmfb"
            src.write_text(update_mlir(a.tensors, a.numel, kind == "tied"))
            subprocess.run(["iree-compile", str(src), *flags, "-o", str(vmfb)], check=True)
            vmfbs[kind] = vmfb
        for _ in range(a.rounds):
            for kind, vmfb in vmfbs.items():
                inputs = [f"{a.numel}xf32=0.5"] * (4 * a.tensors) + ["f32=1"] * len(SCALARS)
                times[kind].append(main_ms(vmfb, inputs, min_time=1.0))
            times["eager fused AdamW"].append(eager_ms(a.tensors, a.numel))
    print(f"{a.tensors} AdamW updates of {a.numel} float32 elements ({gbytes * 1e3:.0f} MB moved); "
          f"medians of {a.rounds} alternated rounds, 2 threads\n")
    print("| update | ms | range | GB/s |")
    print("|---|---:|---|---:|")
    for kind, ts in times.items():
        med = statistics.median(ts)
        print(f"| {kind} | {med:.2f} | {min(ts):.2f}-{max(ts):.2f} | {gbytes / med * 1e3:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
