"""What drives: each (row, backend) pair in a fresh subprocess
(``run_subprocess``, which reads the worker's ``@@RESULT@@`` line), rounds
merged, the inputs' directory and the title's environment line."""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from _specs import RESULT_TAG, Spec


def run_subprocess(script: str, spec: Spec, backend: str, warmup: int, inputs: str,
                   timeout: float, log_dir: str | None = None, cold: bool = True,
                   threads: int | None = None, log_tag: str = "") -> dict:
    """Run one worker; its log, with ``log_dir``, is ``<row>_<backend><log_tag>.log``
    (a tag per round keeps every round's)."""
    cmd = [sys.executable, script, "--_worker", backend, "--model", spec.name,
           "--batch", str(spec.batch), "--steps", str(spec.steps), "--warmup", str(warmup),
           "--_inputs", inputs]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Steps are timed compiled: wait for each compile rather than run eagerly
    # meanwhile (background compiles: benchmarks/first_step.py).
    env.setdefault("LAZY_MLIR_COMPILE", "wait")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   BENCH_TORCH_THREADS=str(threads))
    cache = None
    if cold:
        # Fresh compile caches, so that the first step measures a cold compile
        # (torch.compile's FX/inductor cache, lazy-mlir's persistent module cache).
        cache = tempfile.mkdtemp(prefix="bench_cache_")
        env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   LAZY_MLIR_CACHE_DIR=os.path.join(cache, "lazy_mlir"),
                   XDG_CACHE_HOME=os.path.join(cache, "xdg"))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    wall = time.perf_counter() - t0
    if log_dir:
        with open(os.path.join(log_dir, f"{spec.key}_{backend}{log_tag}.log"), "w") as f:
            f.write(" ".join(cmd) + f"\n# rc={p.returncode} wall={wall:.1f}s\n")
            f.write("## stdout\n" + p.stdout + "\n## stderr\n" + p.stderr)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            res["wall_s"] = wall
            res["load"] = load
            return res
    # The worker died without reporting (signal, abort in native code, ...).
    tail = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
    err = next((ln for ln in reversed(tail) if "Error" in ln or "error" in ln),
               tail[-1] if tail else "")
    return {"error": f"worker exited with code {p.returncode}: {err.strip()}"[:300],
            "wall_s": wall, "load": load}


def merge_rounds(results: list[dict]) -> dict:
    """One row's result from several rounds (fresh subprocesses) of a pair:
    every round's steps together, and each round's median (``round_ms``) for
    ``paired_ratio``. The first round gives the first step and the losses; a
    round that failed fails the row."""
    for res in results:
        if "error" in res:
            return res
    out = dict(results[0])
    if len(results) > 1:
        out["steady_ms"] = [t for res in results for t in res["steady_ms"]]
        out["round_ms"] = [statistics.median(res["steady_ms"]) for res in results]
        out["load"] = max(res.get("load", 0) for res in results)
    return out


def environment_line(load0: float, t_start: float) -> str:
    """The benchmark title's tail: torch version, cores, load and total time."""
    import platform
    import time
    import torch
    return (f"torch {torch.__version__}, {os.cpu_count()} CPU cores ({platform.machine()}); "
            f"load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
            f"total {time.perf_counter() - t_start:.0f} s")


def inputs_dir() -> str:
    return tempfile.mkdtemp(prefix="lazy_mlir_bench_")
