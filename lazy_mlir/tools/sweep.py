"""``python -m lazy_mlir.tools.sweep``: every model of the sweep trained
eagerly and on the lazy device, one child process per entry, resumable.

Each entry's record (``tools/sweep_run.py``) is appended to the results
file as one JSON line as soon as it ends, so a crash, a hang (killed after
``--timeout`` seconds) or a stopped sweep costs only the entry it was on;
a rerun skips the names already recorded (``--redo`` runs them again).
``--report`` writes the markdown summary of a results file.

    python -m lazy_mlir.tools.sweep --list
    python -m lazy_mlir.tools.sweep --only nn/ --only hf/causal-lm/llama
    python -m lazy_mlir.tools.sweep --sample          # the CI sample
    python -m lazy_mlir.tools.sweep --report          # results -> REPORT.md
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from .sweep_report import MODES, write_report

HERE = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "sweep"
RESULTS = HERE / "results.jsonl"


def _names(only: list[str], sample: bool) -> list[str]:
    from lazy_mlir.models.sweep import CI_SAMPLE, all_entries
    if sample:
        return list(CI_SAMPLE)
    names = [e.name for e in all_entries() if not only or any(_matches(o, e.name) for o in only)]
    return _round_robin(names)


def _matches(only: str, name: str) -> bool:
    """``--only``: names containing it; ending in ``$``, that name only."""
    return name == only[:-1] if only.endswith("$") else only in name


def _round_robin(names: list[str]) -> list[str]:
    """One of each family in turn (``nn``, ``hf/causal-lm``, ...), so a
    sweep stopped early has covered every family."""
    families: dict[str, list[str]] = {}
    for n in names:
        families.setdefault(n.rsplit("/", 1)[0], []).append(n)
    queues = list(families.values())
    out = []
    while any(queues):
        out += [q.pop(0) for q in queues if q]
    return out


def recorded(path: pathlib.Path) -> dict[str, dict]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out[rec["name"]] = rec
    return out


def run_child(name: str, steps: int, timeout: float, env: dict | None = None) -> dict:
    """One entry in a child process: its record, or why the child died."""
    cmd = [sys.executable, "-m", "lazy_mlir.tools.sweep", "--child", name, "--steps", str(steps)]
    child_env = dict(os.environ, LAZY_MLIR_COMPILE="wait", **(env or {}))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired:
        return {"name": name, "status": "hang", "error": f"killed after {timeout:.0f} s"}
    wall = round(time.perf_counter() - t0, 1)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode == 0 and lines:
        rec = json.loads(lines[-1])
        rec["wall_s"] = wall
        return rec
    return {"name": name, "status": "died", "wall_s": wall,
            "error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"}


def merged(new: dict, old: dict | None) -> dict:
    """``new`` with the modes it did not run taken from ``old`` (a rerun of
    one mode, ``LAZY_MLIR_SWEEP_MODES=train_step``, keeps the entry's
    earlier plain-loop result); ``kept`` names the modes so taken."""
    if not old or new.get("status") != "ran" or old.get("status") != "ran":
        return new
    kept = [m for m in MODES if m in old and m not in new]
    if not kept:
        return new
    out = dict(new)
    for m in kept:
        out[m] = old[m]
    if "no_dropout" in old and "no_dropout" not in out:
        out["no_dropout"] = old["no_dropout"]
    out["kept"] = kept
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lazy_mlir.tools.sweep", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", default=[],
                   help="names containing this (ending in $: this name only)")
    p.add_argument("--sample", action="store_true", help="the CI sample only")
    p.add_argument("--list", action="store_true")
    p.add_argument("--steps", type=int, default=7)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per entry")
    p.add_argument("--results", type=pathlib.Path, default=RESULTS)
    p.add_argument("--redo", action="store_true", help="run recorded entries again")
    p.add_argument("--redo-status", action="append", default=[],
                   help="run again the recorded entries of this status (eager-fails, died, hang)")
    p.add_argument("--report", action="store_true", help="write REPORT.md beside the results")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        from .sweep_run import run_entry
        modes = os.environ.get("LAZY_MLIR_SWEEP_MODES", "plain,train_step").split(",")
        print(json.dumps(run_entry(args.child, args.steps, tuple(modes))), flush=True)
        return 0
    if args.report:
        print(write_report(recorded(args.results), args.results.with_name("REPORT.md")))
        return 0
    names = _names(args.only, args.sample)
    if args.list:
        print("\n".join(names))
        return 0
    earlier = recorded(args.results)
    done = {} if args.redo else earlier
    todo = [n for n in names if n not in done or done[n].get("status") in args.redo_status]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(todo):
        rec = merged(run_child(name, args.steps, args.timeout), earlier.get(name))
        with args.results.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        print(f"[{i + 1}/{len(todo)}] {name}: {rec.get('status')} "
              f"{rec.get('error', '')[:120]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
