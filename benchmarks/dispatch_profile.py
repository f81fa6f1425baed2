"""Where a compiled graph spends its time, dispatch by dispatch (cpu target).

    LAZY_MLIR_DUMP_DIR=dump python train.py        # or: lazy-mlir dump --out dump ...
    python benchmarks/dispatch_profile.py dump [--graph N] [--threads 2] [--top 30]
    python benchmarks/dispatch_profile.py model.linalg.mlir --flag=--iree-opt-data-tiling ...

Compiles the graph's linalg stage with the flags it was compiled with (from the
dump's manifest) plus ``--iree-hal-dump-executable-benchmarks-to``, compiles
each executable's benchmark module and times it with ``iree-benchmark-module``
on ``--threads`` local-task workers, and counts how often the module calls
each one (an executable reused for every batch slice of a weight gradient runs
once per slice): the table's total is per call times calls. Also times the
whole module (inputs are splats of zero) so the dispatch sum can be compared
with the real call.

For matmul-like dispatches (``matmul_MxNxK`` in IREE's dispatch name) it
prints GFLOP/s, the figure to hold against the machine's limit.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_MATMUL = re.compile(r"matmul(?:_like)?_(\d+)x(\d+)x(\d+)_")
_MAIN = re.compile(r"func\.func @main\((.*?)\)\s*->", re.S)
_TENSOR = re.compile(r"tensor<([^>]*)>")
_CALL = re.compile(r"stream\.cmd\.dispatch @[\w$.-]+::@[\w$.-]+::@([\w$.-]+)")


def _bench(vmfb: Path, threads: int, min_time: float, extra=()) -> list[tuple[str, float]]:
    """(benchmark name, real time in ms) for every benchmark of a module."""
    cmd = ["iree-benchmark-module", f"--module={vmfb}", "--device=local-task",
           f"--task_topology_group_count={threads}", "--benchmark_format=json",
           f"--benchmark_min_time={min_time}", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    return [(b["name"], b["real_time"] * scale[b["time_unit"]])
            for b in json.loads(out)["benchmarks"] if b.get("run_type") != "aggregate"]


def _main_inputs(mlir: str) -> list[str]:
    """``--input`` values (zero splats) for ``@main``'s arguments."""
    m = _MAIN.search(mlir)
    if not m:
        raise SystemExit("no func.func @main in the file")
    out = []
    for t in _TENSOR.findall(m.group(1)):
        out.append(f"{t}=0")
    return out


def _calls(phases: Path) -> dict[str, int]:
    """How many times the module dispatches each entry point, from the
    executable-sources phase IR that iree-compile dumped."""
    calls: dict[str, int] = {}
    for f in phases.glob("*.executable-sources.mlir"):
        for entry in _CALL.findall(f.read_text()):
            calls[entry] = calls.get(entry, 0) + 1
    return calls


def _source(path: Path, graph: int | None) -> tuple[Path, list[str]]:
    if path.is_file():
        return path, []
    manifest = json.loads((path / "manifest.json").read_text())
    graphs = manifest["graphs"]
    g = graphs[-1] if graph is None else graphs[graph]
    return path / f"{g['index']:04d}-linalg.mlir", list(g["flags"])


def profile(mlir: Path, flags: list[str], threads: int, min_time: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        whole = tmp / "whole.vmfb"
        subprocess.run(["iree-compile", str(mlir), *flags, "-o", str(whole),
                        f"--iree-hal-dump-executable-benchmarks-to={tmp / 'bench'}",
                        f"--dump-compilation-phases-to={tmp / 'phases'}"],
                       check=True)
        calls = _calls(tmp / "phases")
        rows, failed = [], []
        for f in sorted((tmp / "bench").glob("*.mlir")):
            vmfb = f.with_suffix(".vmfb")
            # Some dumped benchmarks do not compile on their own (IREE re-runs
            # the codegen of an already configured executable): listed, not timed.
            if subprocess.run(["iree-compile", str(f), "-o", str(vmfb)],
                              capture_output=True).returncode:
                failed.append(f.name.split("_embedded_")[0].removeprefix("module_"))
                continue
            for name, ms in _bench(vmfb, threads, min_time):
                entry = name.split("/")[0].split("_x86_64_")[-1]
                rows.append((entry, ms, calls.get(entry, 1)))
        inputs = [f"--input={i}" for i in _main_inputs(mlir.read_text())]
        total = _bench(whole, threads, max(min_time, 1.0), ["--function=main", *inputs])
    return {"dispatches": rows, "untimed": failed, "module_ms": total[0][1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a dump directory or a linalg .mlir file")
    p.add_argument("--graph", type=int, default=None, help="graph index in the dump (default: last)")
    p.add_argument("--flag", action="append", default=[], help="iree-compile flag (with a file)")
    p.add_argument("--threads", type=int, default=2, help="local-task workers")
    p.add_argument("--min-time", type=float, default=0.1, help="seconds per benchmark")
    p.add_argument("--top", type=int, default=30, help="rows to print")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = p.parse_args(argv)
    mlir, flags = _source(a.source, a.graph)
    res = profile(mlir, flags + a.flag, a.threads, a.min_time)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))

    from rich.console import Console
    from rich.table import Table
    rows = sorted(res["dispatches"], key=lambda r: -r[1] * r[2])
    total = sum(ms * n for _, ms, n in rows)
    table = Table(title=f"{mlir.name}: {len(rows)} executables, "
                        f"{sum(n for *_, n in rows)} dispatches, {a.threads} threads; "
                        f"sum {total:.1f} ms, whole module {res['module_ms']:.1f} ms")
    for col in ("dispatch", "calls", "ms/call", "ms", "share", "GFLOP/s"):
        table.add_column(col, justify="left" if col == "dispatch" else "right")
    for name, ms, n in rows[:a.top]:
        m = _MATMUL.search(name)
        gf = f"{2 * int(m[1]) * int(m[2]) * int(m[3]) / ms / 1e6:.0f}" if m else ""
        table.add_row(name, str(n), f"{ms:.2f}", f"{ms * n:.2f}", f"{ms * n / total:.0%}", gf)
    Console().print(table)
    if res["untimed"]:
        Console().print(f"not timed (their benchmark does not compile alone): "
                        f"{', '.join(res['untimed'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
