"""Training-step benchmark: eager vs torch.compile vs TorchScript LTC vs lazy-mlir.

    python benchmarks/train_step.py [--steps N] [--warmup W] [--models cnn,lenet,mlp]
    python benchmarks/train_step.py --models same,depthwise   # other convolution shapes
        [--backends eager,compile,ts_lazy,lazy_mlir,lazy_mlir_step,lazy_mlir_compile]
        [--out FILE.md] [--quick] [--schedule onecycle]

Each (model, backend) pair runs in a fresh subprocess (``--_worker``): the
TorchScript lazy backend and lazy-mlir both own the ``lazy`` device and cannot
share a process, and a fresh process makes the first-step (compile) latency
comparable. The batch and initial weights are created once by the driver and
loaded by every worker.

A step is zero_grad(set_to_none=True), forward, loss, backward, optimizer.step()
and ``loss.item()`` (lazy backends call mark_step() first). Reported: the first
step (includes compilation), then min/median/max over ``--steps`` steps after
``--warmup`` untimed steps, the median relative to eager, and whether the
step-1 loss matches eager's (1e-3 relative; 1e-4 absolute for torch.compile).
With ``--rounds R`` every backend of a row runs R times, in turn; the ratio is
then the median of the R per-round ratios, with their range.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps per row (default: 30 for cnn, 100 for mlp, 200 for lenet "
                        "b64, 1000 for lenet b1; 5 with --quick)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    p.add_argument("--models", default=",".join(H.MODELS),
                   help=f"of {', '.join(H.MODELS + H.CONV_MODELS)} (default: "
                        f"{','.join(H.MODELS)})")
    p.add_argument("--backends", default=",".join(H.BACKENDS))
    p.add_argument("--out", default=None, help="also write the markdown table here")
    p.add_argument("--quick", action="store_true",
                   help="5 timed steps, batch-64/128 rows only (no LeNet batch 1)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per subprocess")
    p.add_argument("--log-dir", default=None, help="keep each worker's stdout/stderr here")
    p.add_argument("--threads", type=int, default=None,
                   help="torch/OpenMP threads per worker (default: torch's default)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every backend of a row this many times, in turn: the ratio to "
                        "eager is then the median of each round's ratio (with its range), "
                        "which a noisy machine moves less than one run of each")
    p.add_argument("--schedule", choices=("none", "onecycle"), default="none",
                   help="step a learning-rate scheduler after every step (onecycle: "
                        "OneCycleLR, which also cycles Adam's betas and SGD's momentum)")
    p.add_argument("--warm-caches", action="store_true",
                   help="let workers use the user's compile caches (default: a fresh, "
                        "empty cache per worker, so the first step is a cold compile)")
    # internal: one worker
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_inputs", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def worker_main(a) -> int:
    res = H.run_worker(a._worker, a.model, a.batch, a.steps, a.warmup, a._inputs)
    H.emit(res)
    if "traceback" in res:
        sys.stderr.write(res["traceback"])
    return 0


def main(argv=None) -> int:
    a = parse_args(argv)
    if a._worker:
        return worker_main(a)

    from rich.console import Console
    console = Console(stderr=True)
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    for b in backends:
        if b not in H.BACKENDS:
            raise SystemExit(f"unknown backend {b!r}; choose from {', '.join(H.BACKENDS)}")
    if "eager" not in backends:
        console.print("[yellow]eager is not selected: no ratios or correctness checks[/]")
    # eager first: it is the reference for the others
    backends = sorted(backends, key=H.BACKENDS.index)
    specs = H.default_specs(models, a.quick, a.steps)

    tmp = H.inputs_dir()
    if a.log_dir:
        os.makedirs(a.log_dir, exist_ok=True)
    script = os.path.abspath(__file__)
    os.environ["BENCH_SCHEDULE"] = a.schedule  # (read by every worker)
    rows: list[H.Row] = []
    t_start = time.perf_counter()
    load0 = os.getloadavg()[0]
    try:
        for spec in specs:
            path = os.path.join(tmp, f"{spec.key}.pt")
            H.make_inputs(spec, path)
            runs = {b: [] for b in backends}
            for r in range(a.rounds):
                for b in backends:
                    round_note = f" round {r + 1}/{a.rounds}" if a.rounds > 1 else ""
                    console.print(f"[bold]{spec.name}[/] b={spec.batch} [cyan]{b}[/]"
                                  f"{round_note} ({spec.steps} steps + {a.warmup} warmup) ...",
                                  end=" ")
                    res = H.run_subprocess(script, spec, b, a.warmup, path, a.timeout,
                                           a.log_dir, cold=not a.warm_caches,
                                           threads=a.threads,
                                           log_tag=f"_round{r + 1}" if a.rounds > 1 else "")
                    runs[b].append(res)
                    if "error" in res:
                        console.print(f"[red]error[/] {res['error']}")
                    else:
                        console.print(f"first {res['first_ms']:.0f} ms, loss@1 "
                                      f"{res['losses'][0]:.6f} ({res['wall_s']:.1f} s)")
            rows += [H.Row(spec, b, H.merge_rounds(runs[b])) for b in backends]
    finally:
        for f in os.listdir(tmp):
            os.remove(os.path.join(tmp, f))
        os.rmdir(tmp)

    H.judge(rows)
    title = (f"## Training step, {a.warmup} warmup steps, "
             f"{'warm' if a.warm_caches else 'cold (empty)'} compile caches; "
             + H.environment_line(load0, t_start))
    H.print_report(rows, "training step", title, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
