"""What the benchmarks of hand-written IREE modules share: the cpu target's
compile flags, the malloc settings lazy-mlir's runtime runs under, and
``iree-benchmark-module``'s wall time of a module's ``main``."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
          "MALLOC_ARENA_MAX": "1"}  # as runtime/host_memory.py sets them
MS_PER_UNIT = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def cpu_flags() -> list[str]:
    """``iree-compile`` flags of lazy-mlir's cpu target."""
    from lazy_mlir.targets import get_target
    target = get_target("cpu")
    return [f"--iree-hal-target-backends={target.backend}", *target.flags]


def main_ms(vmfb: Path, inputs: list[str], min_time: float, threads: int = 2) -> float:
    """Wall ms of one call of ``main`` (``inputs``: ``--input`` values) on
    ``threads`` local-task workers, under ``MALLOC``."""
    out = subprocess.run(
        ["iree-benchmark-module", f"--module={vmfb}", "--device=local-task",
         f"--task_topology_group_count={threads}", "--function=main",
         *[f"--input={i}" for i in inputs], f"--benchmark_min_time={min_time}s",
         "--benchmark_format=json"],
        capture_output=True, text=True, check=True, env={**os.environ, **MALLOC}).stdout
    b = [r for r in json.loads(out)["benchmarks"] if r.get("run_type") != "aggregate"][0]
    return b["real_time"] * MS_PER_UNIT[b["time_unit"]]
