"""The long mode: ``python -m tests.fuzz [--hours H] [--start SEED] [--out DIR]``.

Runs programs seed after seed (each chunk in a child process, so a crash of
the process is a finding, blamed on one seed by running the chunk's seeds
one by one), shrinks every new finding to a minimal repro, writes it to
``DIR/seed-<n>-<mode>-<kind>.py`` and prints programs run and findings per
hour. Lazy-device programs use seeds from ``--start``; the ``lm.jit`` and
``torch.compile`` modes run the functional programs of the same seeds.
``--seeds 3,17`` reruns given seeds (and shrinks what they find).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("LAZY_MLIR_COMPILE", "wait")
os.environ.setdefault("LAZY_MLIR_COMPILE_WORKERS", "1")  # a compiler crash costs one graph


def _child(seeds: list[int], batch: int, out: Path) -> None:
    """Check ``seeds`` in every mode; one JSON line per finding, shrunk."""
    import logging
    logging.disable(logging.WARNING)
    from .gen import generate
    from .run import check
    from .shrink import minimal
    seen = set()
    for k in range(0, len(seeds), batch):
        chunk = seeds[k:k + batch]
        found = check([generate(s) for s in chunk], modes=("lazy",), batch=batch)
        found += check([generate(s, functional=True) for s in chunk], modes=("jit", "dynamo"),
                       batch=batch)
        for f in found:
            if (f.seed, f.mode, f.kind) in seen:
                continue
            seen.add((f.seed, f.mode, f.kind))
            small = minimal(f)
            path = out / f"seed-{f.seed}-{f.mode}-{f.kind}.py"
            path.write_text(f"# {f.summary()}\n" + small.source(device="lazy"))
            print(json.dumps({"seed": f.seed, "mode": f.mode, "kind": f.kind,
                              "detail": f.detail, "repro": small.body(), "path": str(path)}),
                  flush=True)
        print(json.dumps({"done": chunk}), flush=True)


def _run_child(seeds: list[int], batch: int, out: Path) -> tuple[list[dict], list[int], int]:
    cmd = [sys.executable, "-m", "tests.fuzz", "--child", ",".join(map(str, seeds)),
           "--batch", str(batch), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2])
    findings, done = [], []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            (done.extend(rec["done"]) if "done" in rec else findings.append(rec))
    return findings, done, proc.returncode


def _blame(seeds: list[int], batch: int, out: Path) -> list[dict]:
    """Findings of ``seeds``; where the process dies, the seeds it had not
    done are run again in tens, and a ten that dies one seed at a time."""
    new, done, rc = _run_child(seeds, batch, out)
    if rc == 0:
        return new
    left = [s for s in seeds if s not in done]
    if len(left) == 1:
        return new + [{"seed": left[0], "mode": "process", "kind": "crash",
                       "detail": f"exit status {rc}", "repro": f"--seeds {left[0]}"}]
    step = 10 if len(left) > 10 else 1
    for k in range(0, len(left), step):
        new += _blame(left[k:k + step], step, out)
    return new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz")
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--start", type=int, default=100_000)
    ap.add_argument("--chunk", type=int, default=120, help="programs per child process")
    ap.add_argument("--batch", type=int, default=40, help="programs per graph")
    ap.add_argument("--out", default="fuzz-findings")
    ap.add_argument("--seeds", help="comma-separated seeds to rerun")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.child:
        _child([int(s) for s in args.child.split(",")], args.batch, out)
        return 0
    t0, ran, findings = time.time(), 0, []
    seed = args.start
    todo = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    while time.time() - t0 < args.hours * 3600:
        seeds = todo if todo is not None else list(range(seed, seed + args.chunk))
        seed += args.chunk
        new = _blame(seeds, args.batch, out)
        ran += len(seeds)
        findings += new
        for f in new:
            print(f"FINDING seed {f['seed']} [{f['mode']}] {f['kind']}: {f['detail'][:200]}\n"
                  f"{f['repro']}\n", flush=True)
        hours = (time.time() - t0) / 3600
        print(f"{ran} programs, {len(findings)} findings in {hours * 60:.1f} min: "
              f"{ran / hours:.0f} programs/h, {len(findings) / hours:.1f} findings/h", flush=True)
        if todo is not None:
            break
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
