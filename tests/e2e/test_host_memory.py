"""The cpu target keeps freed memory in the heap (runtime/host_memory.py).

A graph whose intermediate is larger than glibc's mmap threshold (a 64 MB
matmul result) page-faults that memory in on every call when malloc returns
it to the system; with freed memory kept, a steady call faults nothing in.
Each setting runs in its own process: mallopt is process-wide and applied once.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, torch, lazy_mlir as lm
    from lazy_mlir.runtime import host_memory
    a = torch.randn(4096, 64).to("lazy")
    b = torch.randn(64, 4096).to("lazy")
    lm.mark_step()
    faults = []
    for _ in range(4):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        out = torch.relu(a @ b).sum(0).cpu()   # a 4096x4096 (64 MB) intermediate
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(host_memory.in_effect(), min(faults[2:]))
""")


def _steady_faults(keep: str) -> tuple[bool, int]:
    env = dict(os.environ, LAZY_MLIR_KEEP_FREED_MEMORY=keep)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    kept, faults = out.stdout.split()[-2:]
    return kept == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_a_steady_call_faults_nothing_in_when_freed_memory_is_kept():
    kept, faults = _steady_faults("1")
    assert kept
    assert faults < 2000, faults           # 64 MB is 16384 pages
    kept, faults = _steady_faults("0")     # malloc as it is: the 64 MB faulted in again
    assert not kept
    assert faults > 8000, faults
