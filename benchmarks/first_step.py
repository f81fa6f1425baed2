"""Time to the first step and wall time of the first steps of each real model.

For each model of ``lazy_mlir.models.real`` (tiny; ``--size medium``)
trained with AdamW, each backend runs in a fresh subprocess:

- ``eager``: PyTorch on the CPU;
- ``compile``: ``torch.compile`` of the step (inductor);
- ``lazy_mlir``: the lazy device, compiles in the background (the default:
  steps run eagerly until their graph is compiled);
- ``lazy_mlir_wait``: the lazy device with ``LAZY_MLIR_COMPILE=wait`` (each
  miss waits for its compile, as before background compiles).

``cold``: fresh compile caches (lazy-mlir's persistent modules, inductor's);
``warm``: a second process on the cache the cold one filled (the cold
lazy-mlir run waits for its last compiles after timing, so the cache is
whole). Ratios are to eager's first step and eager's wall time.

    python benchmarks/first_step.py                       # all models, 50 steps
    python benchmarks/first_step.py --models gpt2,lstm --steps 20
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import RESULT_TAG, emit  # noqa: E402

BACKENDS = ("eager", "compile", "lazy_mlir", "lazy_mlir_wait")
COUNTERS = ("UncachedCompile", "EagerWhileCompiling", "CachedCompile", "PersistentCacheHit")


def worker(backend: str, name: str, size: str, steps: int) -> dict:
    import torch
    from lazy_mlir.models.real import real_model
    res: dict = {"backend": backend, "model": name}
    lazy = backend.startswith("lazy_mlir")
    if lazy:
        import lazy_mlir as lm
    device = "lazy" if lazy else "cpu"
    m = real_model(name, size)
    model = m.make().to(device)
    model.train()
    opt = m.optimizer(model)

    def step(batch):
        opt.zero_grad(set_to_none=True)
        loss = m.loss(model, batch)
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(step) if backend == "compile" else step
    times, losses = [], []
    for i in range(steps):
        t0 = time.perf_counter()
        loss = fn(m.batch(i, device))
        if lazy:
            lm.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    res.update(first_s=times[0], total_s=sum(times), losses=losses)
    if lazy:
        from lazy_mlir.compile_service.lookup import compiles_in_flight, wait_for_compiles
        res["in_flight_at_end"] = compiles_in_flight()
        res.update({c: lm.metrics.counter_value(c) for c in COUNTERS})
        res["fallbacks"] = sum(lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
                               if n.startswith("aten::"))
        wait_for_compiles()  # untimed: the warm run finds every module
    return res


def run(backend: str, name: str, size: str, steps: int, cache: str, timeout: float) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               LAZY_MLIR_CACHE_DIR=os.path.join(cache, "lazy_mlir"),
               TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    env["LAZY_MLIR_COMPILE"] = "wait" if backend == "lazy_mlir_wait" else "background"
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", backend, "--models", name,
           "--size", size, "--steps", str(steps)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    tail = (p.stderr or p.stdout).strip().splitlines()
    return {"error": f"exit {p.returncode}: {tail[-1] if tail else ''}"[:200]}


def table(rows: list[dict], steps: int, size: str) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"first steps of the real models ({size}), {steps} steps, AdamW")
    for col in ("model", "backend", "cache", "first step s", "x eager", f"{steps} steps s",
                "x eager", "loss vs eager", "notes"):
        t.add_column(col, justify="left" if col in ("model", "backend", "cache", "notes")
                     else "right")
    eager = {r["model"]: r for r in rows if r["backend"] == "eager" and "error" not in r}
    for r in rows:
        if "error" in r:
            t.add_row(r["model"], r["backend"], r["cache"], "-", "-", "-", "-", "-", r["error"])
            continue
        e = eager.get(r["model"])
        first = f"{r['first_s'] / e['first_s']:.1f}" if e else "-"
        total = f"{r['total_s'] / e['total_s']:.1f}" if e else "-"
        drift = (f"{max(abs(a - b) for a, b in zip(r['losses'], e['losses'])):.1e}"
                 if e else "-")
        notes = ", ".join(f"{c} {r[c]}" for c in COUNTERS + ("fallbacks",) if r.get(c))
        t.add_row(r["model"], r["backend"], r["cache"], f"{r['first_s']:.2f}", first,
                  f"{r['total_s']:.2f}", total, drift, notes)
    Console(width=200).print(t)  # whole rows in a log or a pipe too


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gpt2,bert,vit,resnet,lstm,transformer")
    ap.add_argument("--size", default="tiny", choices=("tiny", "medium"))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--_worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._worker:
        emit(worker(args._worker, args.models, args.size, args.steps))
        return
    rows = []
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            cache = tempfile.mkdtemp(prefix="first_step_")
            try:
                for temp in ("cold",) if backend == "eager" else ("cold", "warm"):
                    r = run(backend, name, args.size, args.steps, cache, args.timeout)
                    rows.append(dict(r, model=name, backend=backend, cache=temp))
                    what = r.get("error") or (f"first {r['first_s']:.2f} s, "
                                              f"total {r['total_s']:.2f} s")
                    print(f"{name} {backend} {temp}: {what}", flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
    table(rows, args.steps, args.size)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
