"""Training over batches of varying sequence length (issue 53, deliverable 5).

    python benchmarks/dynamic_lengths.py [--models gpt2,bert,lstm,transformer]
        [--size tiny|medium] [--steps 50] [--modes ...] [--quick]

Each model of ``lazy_mlir.models.real`` (built with ``seq`` = the largest
length) trains ``--steps`` steps on batches whose length is drawn from 16-128
(tiny) or 64-512 (medium), seeded, the same draw for every mode. Each mode runs
in its own process (a cold cache directory for the lazy ones): ``eager``,
``lazy`` (the lazy device, background compiles, dynamic dimensions),
``lazy-static`` (``LAZY_MLIR_DYNAMIC=0``), ``train_step``
(``lm.compile_train_step``), ``inductor`` (``torch.compile(dynamic=True)``),
``dynamo`` (``torch.compile(backend="lazy_mlir")``) and ``lazy-fixed`` (the
lazy device on one fixed length: the static reference). Reported: compiles
(UncachedCompile + PersistentCacheHit, DynamicShapeCompile, DynamicShapeHit),
total wall time, the median step time of the second half (steady) and its
ratio to eager's and to lazy-fixed's. ``--quick``: gpt2 only, 1 layer (~2.5 min),
8 steps. Numbers on a loaded machine are not benchmark figures.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ("eager", "lazy", "lazy-static", "train_step", "inductor", "dynamo", "lazy-fixed")
RANGES = {"tiny": (16, 128), "medium": (64, 512)}
COUNTERS = ("UncachedCompile", "PersistentCacheHit", "DynamicShapeCompile", "DynamicShapeHit",
            "DynamicShapeFailed", "EagerGraph")


def lengths(size: str, steps: int, fixed: bool) -> list[int]:
    lo, hi = RANGES[size]
    rnd = random.Random(53)
    return [(lo + hi) // 2 if fixed else rnd.randint(lo, hi) for _ in range(steps)]


def _loss(rm, model, batch):
    if rm.name != "transformer":
        return rm.loss(model, batch)
    ids = batch["input_ids"]  # learned positions sliced to the batch's length
    x = model.embed(ids) + model.position[: ids.shape[1]]
    return rm.loss_fn(model.head(model.encoder(x)), batch["labels"])


def _batch(rm, n, length, device):
    import torch
    from lazy_mlir.models.real import VOCAB, SIZES
    g = torch.Generator().manual_seed(1000 + n)
    ids = torch.randint(0, VOCAB, (SIZES[rm.size.split(",")[0]]["batch"], length), generator=g)
    labels = ids.clone() if rm.name == "gpt2" else torch.randint(0, VOCAB, ids.shape, generator=g)
    return {"input_ids": ids.to(device), "labels": labels.to(device)}


def _make_step(mode, rm, model, opt):
    import torch
    import lazy_mlir as lm
    if mode == "train_step":
        fn = lm.compile_train_step(model, None if rm.computes_own_loss else rm.loss_fn, opt)
        return lambda b: fn(**b)
    fwd = model
    if mode in ("inductor", "dynamo"):
        fwd = torch.compile(model, dynamic=True) if mode == "inductor" else \
            torch.compile(model, backend="lazy_mlir")

    def step(b):
        opt.zero_grad(set_to_none=True)
        loss = _loss(rm, fwd, b)
        loss.backward()
        opt.step()
        if mode in ("lazy", "lazy-static", "lazy-fixed"):
            lm.mark_step()
        return loss
    return step


def worker(name: str, size: str, mode: str, steps: int, layers: int | None) -> dict:
    import torch
    import lazy_mlir as lm
    from lazy_mlir.models.real import real_model
    lo, hi = RANGES[size]
    dims = {"seq": hi, **({"layers": layers} if layers else {})}
    rm = real_model(name, size, **dims)
    device = "lazy" if mode in ("lazy", "lazy-static", "lazy-fixed", "train_step") else "cpu"
    model = rm.make().to(device)
    opt = rm.optimizer(model)
    step = _make_step(mode, rm, model, opt)
    times, error = [], None
    t0 = time.perf_counter()
    try:
        for n, length in enumerate(lengths(size, steps, mode == "lazy-fixed")):
            b = _batch(rm, n, length, device)
            s = time.perf_counter()
            float(step(b))
            times.append(time.perf_counter() - s)
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        error = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    wall = time.perf_counter() - t0
    counts = {c: lm.metrics.counter_value(c) for c in COUNTERS}
    steady = times[len(times) // 2:] or times
    return {"steps": len(times), "wall": wall, "steady": statistics.median(steady) if steady else None,
            "counters": counts, "error": error}


def run_mode(name, size, mode, steps, layers, timeout) -> dict:
    env = dict(os.environ)
    env["LAZY_MLIR_CACHE_DIR"] = tempfile.mkdtemp(prefix="lm-dyn-")
    if mode == "lazy-static":
        env["LAZY_MLIR_DYNAMIC"] = "0"
    cmd = [sys.executable, __file__, "--worker", f"{name},{size},{mode},{steps},{layers or 0}"]
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout {timeout}s"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][:120]}"}


def _fmt(x):
    return "-" if x is None else f"{x * 1e3:.1f}"


def report(name, results: dict) -> None:
    from rich.console import Console
    from rich.table import Table
    t = Table(title=f"{name}: varying lengths")
    for col in ("mode", "steps", "compiles", "dyn compile", "dyn hit", "wall s", "steady ms",
                "vs eager", "vs fixed", "note"):
        t.add_column(col)
    eager = results.get("eager", {}).get("steady")
    fixed = results.get("lazy-fixed", {}).get("steady")
    for mode, r in results.items():
        c = r.get("counters", {})
        s = r.get("steady")
        ratio = (lambda ref: f"{s / ref:.2f}" if s and ref else "-")
        note = r.get("error") or ("; ".join(f"{k} {v}" for k, v in c.items()
                                           if k in ("DynamicShapeFailed", "EagerGraph") and v))
        t.add_row(mode, str(r.get("steps", "-")),
                  str(c.get("UncachedCompile", 0) + c.get("PersistentCacheHit", 0)) if c else "-",
                  str(c.get("DynamicShapeCompile", "-")), str(c.get("DynamicShapeHit", "-")),
                  f"{r['wall']:.1f}" if "wall" in r else "-", _fmt(s), ratio(eager), ratio(fixed),
                  note or "")
    Console(width=160).print(t)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gpt2,bert,lstm,transformer")
    ap.add_argument("--size", default="tiny", choices=sorted(RANGES))
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--layers", type=int, default=0, help="override the size's layers")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        name, size, mode, steps, layers = a.worker.split(",")
        print("RESULT " + json.dumps(worker(name, size, mode, int(steps), int(layers) or None)))
        return
    if a.quick:
        a.models, a.steps, a.layers, a.timeout = "gpt2", 8, 1, 300
    print(f"load: {os.getloadavg()}; lengths {RANGES[a.size]}, {a.steps} steps")
    for name in a.models.split(","):
        results = {m: run_mode(name, a.size, m, a.steps, a.layers, a.timeout)
                   for m in a.modes.split(",")}
        report(name, results)


if __name__ == "__main__":
    main()
