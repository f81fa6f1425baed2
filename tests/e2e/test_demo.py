"""``lazy-mlir demo`` as a user runs it: trains, reports the warm-up apart from
the compiled steady state, and times eager before any compile starts."""
from __future__ import annotations

import os
import re
import subprocess
import sys


def test_demo_reports_warmup_apart_from_compiled_steps(tmp_path):
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(tmp_path), LAZY_MLIR_COMPILE="wait",
               COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "lazy_mlir.tools.cli", "demo", "--steps", "12",
                        "--epochs", "1", "--batch-size", "32"],
                       capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    warm = re.search(r"warm-up: steps that traced, compiled or ran eagerly meanwhile\s*│\s*"
                     r"(\d+) steps", out)
    steady = re.search(r"compiled step, median of (\d+)\s*│\s*[\d.]+ ms", out)
    assert warm and steady, out
    # Recorded twice, compiled while the second waits: the rest replay compiled.
    assert 1 <= int(warm[1]) <= 3 and int(warm[1]) + int(steady[1]) == 12, out
    assert re.search(r"compiles finished after training \(cached for the next run\)\s*│\s*0",
                     out), out
    assert "eager PyTorch step, median (timed before any compile)" in out
    assert re.search(r"fallback ops \(aten::\*\)\s*│\s*0", out), out
