"""The cpu target keeps freed memory in the heap (runtime/host_memory.py).

A graph whose intermediate is larger than glibc's mmap threshold and than a
thread arena's heap (a 128 MB matmul result) page-faults that memory in on every call when malloc returns
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
    w = torch.nn.Linear(64, 8192).to("lazy")
    x = torch.randn(4096, 64).to("lazy")
    faults = []
    for _ in range(8):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        torch.relu(w(x)).sum().backward()   # a 4096x8192 (128 MB) intermediate
        lm.mark_step()
        w.weight.grad.sum().item()
        w.weight.grad = None
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    print(host_memory.in_effect(), min(faults[-4:]))
""")



def _steady_faults(keep: str, cache_dir) -> tuple[bool, int]:
    # A cold cache: the compile threads start before the device exists, the
    # order in which a setting applied at device creation came too late.
    # The product's compile defaults (tests compile in-process, in the test's thread).
    env = {k: v for k, v in os.environ.items()
           if k not in ("LAZY_MLIR_COMPILE", "LAZY_MLIR_COMPILE_WORKERS")}
    env.update(LAZY_MLIR_KEEP_FREED_MEMORY=keep, LAZY_MLIR_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=300)
    kept, faults = out.stdout.split()[-2:]
    return kept == "True", int(faults)


@pytest.mark.slow  # (45 s in CI: a performance property; the import test below stays)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt")
def test_a_steady_call_faults_nothing_in_when_freed_memory_is_kept(tmp_path):
    kept, faults = _steady_faults("1", tmp_path / "kept")
    assert kept
    assert faults < 2000, faults           # 128 MB is 32768 pages
    kept, faults = _steady_faults("0", tmp_path / "not")  # malloc as it is: faulted in again
    assert not kept
    assert faults > 16000, faults


@pytest.mark.parametrize("target, kept", [("cpu", True), ("vulkan", False)])
def test_import_keeps_freed_memory_only_for_the_cpu_target(target, kept):
    # Applied at import, before any lazy-mlir thread mallocs; a GPU target's
    # buffers are not host memory, so its process's malloc is left alone.
    env = dict(os.environ, LAZY_MLIR_TARGET=target, LAZY_MLIR_KEEP_FREED_MEMORY="1")
    out = subprocess.run(
        [sys.executable, "-c", "import lazy_mlir; from lazy_mlir.runtime import host_memory;"
         " print(host_memory.in_effect())"], env=env, capture_output=True, text=True,
        check=True, timeout=120)
    assert out.stdout.split()[-1] == str(kept)
