"""Where a compiled graph spends its time, dispatch by dispatch (cpu target).

    LAZY_MLIR_DUMP_DIR=dump python train.py        # or: lazy-mlir dump --out dump ...
    python benchmarks/dispatch_profile.py dump [--graph N] [--threads 2] [--top 30]
    python benchmarks/dispatch_profile.py model.linalg.mlir --flag=--iree-opt-data-tiling ...

Compiles the graph's linalg stage with the flags it was compiled with (from the
dump's manifest), times the whole module with ``iree-benchmark-module`` on
``--threads`` local-task workers (inputs are splats of zero), then runs it
again with ``--print_device_statistics``: IREE's HAL profiling reports each
dispatch's time inside the real call (its inputs where the module left them,
its neighbours running beside it). Rows are per call of ``main``: how often
the module dispatches each executable (an executable reused for every batch
slice of a weight gradient runs once per slice, counted from the
``executable-sources`` phase IR), the time of one dispatch, their total, and
the workgroups (tiles) of one dispatch.

``--isolated`` instead compiles each executable's own benchmark
(``--iree-hal-dump-executable-benchmarks-to``) and times it alone: warm
inputs, no neighbour; on a 2-core machine its sum ran 1.5-2x the module.

A graph that calls PyTorch's kernels (``host_calls/runtime/switches.py``: the LSTM's
oneDNN layers, host BLAS, flash attention) runs only inside lazy-mlir's
process: it is refused with the switch that dumps it compiled whole
(``LAZY_MLIR_RNN=0 LAZY_MLIR_DUMP_DIR=dump ...``).

For contractions (``matmul_MxNxK``, ``batch_matmul_BxMxNxK``,
``conv_NxOHxOWxFxKHxKWxC`` in IREE's dispatch name) it prints GFLOP/s, the
figure to hold against the machine's limit.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# IREE names a contraction's dispatch by its loop ranges, one multiply-add each:
# matmul_MxNxK, batch_matmul_BxMxNxK, matmul_like_..., conv_NxOHxOWxFxKHxKWxC.
_CONTRACTION = re.compile(r"(?:matmul(?:_like)?|conv)_(\d+(?:x\d+){2,})_")
_MAIN = re.compile(r"func\.func @main\((.*?)\)\s*->", re.S)
# Calls into lazy-mlir's host modules (PyTorch's kernels: host_calls/runtime/switches.py),
# each with the switch that compiles the graph without them.
_HOST_CALL = re.compile(r"call @(lazy_mlir_(?:blas|rnn|attention))\.")
_HOST_SWITCH = {"lazy_mlir_blas": "LAZY_MLIR_BLAS=0", "lazy_mlir_rnn": "LAZY_MLIR_RNN=0",
                "lazy_mlir_attention": "LAZY_MLIR_HOST_ATTENTION=0"}
_TENSOR = re.compile(r"tensor<([^>]*)>")
_STAT = re.compile(r"^\s*host_execute (\S+)\s+count=(\d+) total=([\d.]+) (ns|us|ms|s) "
                   r".*?tiles=(\d+)", re.M)
_CALL = re.compile(r"stream\.cmd\.dispatch @[\w$.-]+::@[\w$.-]+::@([\w$.-]+)")


def gflops(dispatch: str, ms: float) -> str:
    """GFLOP/s of a contraction dispatch that takes ``ms``; "" for others."""
    m = _CONTRACTION.search(dispatch)
    return f"{2 * math.prod(map(int, m[1].split('x'))) / ms / 1e6:.0f}" if m else ""


_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}  # milliseconds per unit


def _benchmark(vmfb: Path, threads: int, min_time: float, *extra: str):
    """Run ``iree-benchmark-module`` on the host's local-task device."""
    cmd = ["iree-benchmark-module", f"--module={vmfb}", "--device=local-task",
           f"--task_topology_group_count={threads}", f"--benchmark_min_time={min_time}s",
           *extra]
    return subprocess.run(cmd, capture_output=True, text=True, check=True)


def _bench(vmfb: Path, threads: int, min_time: float, extra=()) -> list[tuple[str, float]]:
    """(benchmark name, real time in ms) for every benchmark of a module."""
    out = _benchmark(vmfb, threads, min_time, "--benchmark_format=json", *extra).stdout
    return [(b["name"], b["real_time"] * _MS[b["time_unit"]])
            for b in json.loads(out)["benchmarks"] if b.get("run_type") != "aggregate"]


def _main_inputs(mlir: str) -> list[str]:
    """``--input`` values (zero splats) for ``@main``'s arguments."""
    m = _MAIN.search(mlir)
    if not m:
        raise SystemExit("no func.func @main in the file")
    out = []
    for t in _TENSOR.findall(m.group(1)):
        empty = "0" in t.split("x")[:-1]  # IREE refuses a splat for 0 elements
        out.append(t if empty else f"{t}=0")
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


def refuse_host_calls(mlir: str) -> None:
    """A module that calls PyTorch's kernels runs only inside lazy-mlir's
    process: ``iree-benchmark-module`` cannot load the host module it
    imports. Say so, and how to dump the graph without the calls."""
    modules = sorted(set(_HOST_CALL.findall(mlir)))
    if modules:
        switches = " ".join(_HOST_SWITCH[m] for m in modules)
        raise SystemExit(
            f"dispatch_profile: this graph calls PyTorch's kernels through "
            f"{', '.join(modules)}, which iree-benchmark-module cannot load; dump it "
            f"again with {switches} (the same graph, compiled whole) to profile it")


def _statistics(vmfb: Path, threads: int, min_time: float, inputs: list[str],
                calls: dict[str, int]) -> list[tuple[str, float, int, float]]:
    """(entry point, ms a dispatch, dispatches a call of main, tiles a dispatch)
    from IREE's device statistics over repeated calls of ``main``."""
    out = _benchmark(vmfb, threads, min_time, "--function=main", "--print_device_statistics",
                     *inputs)
    stats = [(name, int(count), float(total) * _MS[unit], int(tiles))
             for name, count, total, unit, tiles in _STAT.findall(out.stdout + out.stderr)]
    if not stats:
        raise SystemExit("iree-benchmark-module printed no device statistics")
    # Calls of main: the count of any dispatch over its dispatches per call.
    mains = max(1, round(min(count / calls.get(name, 1) for name, count, _, _ in stats)))
    return [(name, total / count, round(count / mains), tiles / count)
            for name, count, total, tiles in stats]


def _isolated(tmp: Path, threads: int, min_time: float,
              calls: dict[str, int]) -> tuple[list, list[str]]:
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
            rows.append((entry, ms, calls.get(entry, 1), None))
    return rows, failed


def profile(mlir: Path, flags: list[str], threads: int, min_time: float,
            isolated: bool = False) -> dict:
    """``dispatches``: (entry point, ms a dispatch, dispatches a call, tiles a
    dispatch or None); ``untimed``; ``module_ms``: the whole call."""
    refuse_host_calls(mlir.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        whole = tmp / "whole.vmfb"
        dump = [f"--iree-hal-dump-executable-benchmarks-to={tmp / 'bench'}"] if isolated else []
        subprocess.run(["iree-compile", str(mlir), *flags, "-o", str(whole), *dump,
                        f"--dump-compilation-phases-to={tmp / 'phases'}"],
                       check=True)
        calls = _calls(tmp / "phases")
        inputs = [f"--input={i}" for i in _main_inputs(mlir.read_text())]
        total = _bench(whole, threads, max(min_time, 1.0), ["--function=main", *inputs])
        if isolated:
            rows, failed = _isolated(tmp, threads, min_time, calls)
        else:
            rows, failed = _statistics(whole, threads, max(min_time, 1.0), inputs, calls), []
    return {"dispatches": rows, "untimed": failed, "module_ms": total[0][1]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="a dump directory or a linalg .mlir file")
    p.add_argument("--graph", type=int, default=None, help="graph index in the dump (default: last)")
    p.add_argument("--flag", action="append", default=[], help="iree-compile flag (with a file)")
    p.add_argument("--threads", type=int, default=2, help="local-task workers")
    p.add_argument("--min-time", type=float, default=0.1,
                   help="seconds per benchmark (at least 1 for the whole module)")
    p.add_argument("--isolated", action="store_true",
                   help="time each executable's own benchmark instead of IREE's "
                        "statistics inside the module")
    p.add_argument("--top", type=int, default=30, help="rows to print")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = p.parse_args(argv)
    mlir, flags = _source(a.source, a.graph)
    res = profile(mlir, flags + a.flag, a.threads, a.min_time, a.isolated)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))

    from rich.console import Console
    from rich.table import Table
    rows = sorted(res["dispatches"], key=lambda r: -r[1] * r[2])
    total = sum(ms * n for _, ms, n, _ in rows)
    how = "each alone" if a.isolated else "inside the module"
    table = Table(title=f"{mlir.name}: {len(rows)} executables, "
                        f"{sum(n for _, _, n, _ in rows)} dispatches, {a.threads} threads, "
                        f"timed {how}; sum {total:.1f} ms, whole module "
                        f"{res['module_ms']:.1f} ms")
    for col in ("dispatch", "calls", "ms/call", "ms", "share", "tiles", "GFLOP/s"):
        table.add_column(col, justify="left" if col == "dispatch" else "right",
                         overflow="fold")
    for name, ms, n, tiles in rows[:a.top]:
        gf = gflops(name, ms)
        table.add_row(name, str(n), f"{ms:.2f}", f"{ms * n:.2f}", f"{ms * n / total:.0%}",
                      "" if tiles is None else f"{tiles:.0f}", gf)
    console = Console()
    if not console.is_terminal:  # a log or a pipe: whole dispatch names, one row each
        console = Console(width=160)
    console.print(table)
    if res["untimed"]:
        console.print(f"not timed (their benchmark does not compile alone): "
                        f"{', '.join(res['untimed'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
