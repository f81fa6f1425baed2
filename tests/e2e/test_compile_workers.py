"""Compile workers (compile_service/compile_pool.py): a compiler crash, a killed
worker or a compile past its time limit costs one graph, never the program.

Each test starts real worker processes (python + torch + torch-mlir + IREE:
seconds each on a loaded machine), so the file keeps to a few graphs.
"""
from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.compile_service import compile_pool, lookup
from lazy_mlir.compile_service.memory_cache import memory_cache

# A real SIGSEGV in the worker, as a compiler bug gives (compile_worker's test
# hook: the int8 matmul that once crashed torch-mlir's lowering compiles now).
MATMUL = textwrap.dedent("""
    import json, torch, lazy_mlir as lm
    torch.manual_seed(0)
    a, b = torch.randn(16, 4), torch.randn(4, 16)
    r = (a.to('lazy') @ b.to('lazy')).cpu()
    print(json.dumps({"equal": torch.allclose(r, a @ b, atol=1e-5),
                      "fallbacks": lm.metrics.counter_value("aten::mm")}))
""")


def _run_script(script: str, tmp_path, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, "-c", script], env=e, capture_output=True,
                          text=True, timeout=600)


def test_a_crashing_compile_survives_in_a_worker(tmp_path):
    out = _run_script(MATMUL, tmp_path, LAZY_MLIR_COMPILE_WORKERS="1",
                      LAZY_MLIR_TEST_WORKER_CRASH="segv")
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"equal": True, "fallbacks": 1}
    assert "compile worker died (killed by SIGSEGV)" in out.stderr
    repro = Path(re.search(r"repro: (\S+)/job.pkl", out.stderr).group(1))
    assert "--repro" in (repro / "command.sh").read_text()
    assert (repro / "job.pkl").exists()


MATMUL_COMPILED = textwrap.dedent("""
    import json, torch, lazy_mlir as lm
    torch.manual_seed(0)
    a, b = torch.randn(16, 4), torch.randn(4, 16)
    f = torch.compile(lambda a, b: a @ b, backend="lazy_mlir")
    print(json.dumps({"equal": torch.allclose(f(a, b), a @ b, atol=1e-5)}))
""")


def test_torch_compile_backend_compiles_in_a_worker(tmp_path):
    """The torch.compile backend's graphs compile in workers too: a crash
    costs that graph (it runs eagerly, with a repro), not the program."""
    out = _run_script(MATMUL_COMPILED, tmp_path, LAZY_MLIR_COMPILE_WORKERS="1",
                      LAZY_MLIR_TEST_WORKER_CRASH="segv")
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"equal": True}
    assert "compile worker died (killed by SIGSEGV)" in out.stderr
    assert "it runs eagerly on the CPU" in out.stderr
    assert re.search(r"repro: \S+", out.stderr)


@pytest.fixture
def workers(monkeypatch, tmp_path):
    """A fresh pool of one worker, compiles waited for. (Not LAZY_MLIR_DUMP_DIR
    for the repros: it turns on the process's dumper for good.)"""
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    monkeypatch.setenv("LAZY_MLIR_CACHE", "0")
    compile_pool.reset()
    memory_cache.clear()  # each test compiles its graphs
    lm.metrics.reset()
    yield
    compile_pool.reset()


def _graph(x: torch.Tensor, k: float) -> torch.Tensor:
    return ((x.to("lazy") * k).tanh() + 1).cpu()


@pytest.mark.parametrize("how", ["segv", pytest.param("kill", marks=pytest.mark.slow)])  # (CI: one way of dying)
def test_a_worker_dying_mid_compile_costs_one_graph(workers, monkeypatch, how, caplog):
    x = torch.randn(6, 5)
    monkeypatch.setenv("LAZY_MLIR_TEST_WORKER_CRASH", how)
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        assert torch.allclose(_graph(x, 3.0), (x * 3.0).tanh() + 1, atol=1e-6)
    assert lm.metrics.counter_value("aten::tanh") == 1  # ran eagerly, counted
    signal = {"segv": "SIGSEGV", "kill": "SIGKILL"}[how]
    assert f"compile worker died (killed by {signal})" in caplog.text
    assert "command.sh" in caplog.text
    monkeypatch.delenv("LAZY_MLIR_TEST_WORKER_CRASH")
    y = torch.randn(7, 5)  # another graph: a new worker compiles it
    out = (y.to("lazy").sigmoid() * 2).cpu()
    assert torch.allclose(out, y.sigmoid() * 2, atol=1e-6)
    assert lm.metrics.counter_value("aten::sigmoid") == 0
    assert lm.metrics.counter_value("UncachedCompile") == 2


def test_a_compile_past_its_time_limit_runs_eagerly(workers, monkeypatch, caplog):
    monkeypatch.setenv("LAZY_MLIR_TEST_WORKER_CRASH", "sleep")
    monkeypatch.setenv("LAZY_MLIR_COMPILE_TIMEOUT", "3")
    x = torch.randn(4, 3)
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        assert torch.allclose(_graph(x, -2.0), (x * -2.0).tanh() + 1, atol=1e-6)
    assert "took more than 3 s (LAZY_MLIR_COMPILE_TIMEOUT)" in caplog.text
    assert lm.metrics.counter_value("aten::tanh") == 1


def test_a_pool_shut_down_under_background_compiles_answers_them(workers, monkeypatch):
    """A pool reset with one compile in its worker and one queued (a test's
    ``reset``): both are answered, so ``wait_for_compiles`` returns. The queued
    one went unanswered and hung every later wait for good. The graphs then
    compile again and run compiled."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    monkeypatch.setenv("LAZY_MLIR_TEST_WORKER_CRASH", "sleep")
    x = torch.randn(4, 3)
    assert torch.allclose(_graph(x, 2.0), (x * 2.0).tanh() + 1, atol=1e-6)  # eager meanwhile
    assert torch.allclose((x.to("lazy") - 1).exp().cpu(), (x - 1).exp(), atol=1e-6)
    assert lookup.compiles_in_flight() == 2
    pool, deadline = compile_pool.pool(), time.monotonic() + 300
    while not any(w.job for w in pool._workers) and time.monotonic() < deadline:
        time.sleep(0.05)  # (until the first job is in the worker, sleeping there)
    compile_pool.reset()
    monkeypatch.delenv("LAZY_MLIR_TEST_WORKER_CRASH")
    lookup.wait_for_compiles(timeout=120)
    assert lookup.compiles_in_flight() == 0
    assert compile_pool.in_flight() == 0
    lm.metrics.reset()
    assert torch.allclose(_graph(x, 2.0), (x * 2.0).tanh() + 1, atol=1e-6)
    assert torch.allclose((x.to("lazy") - 1).exp().cpu(), (x - 1).exp(), atol=1e-6)
    assert lm.metrics.counter_value("EagerWhileCompiling") == 0
    assert lm.metrics.counter_value("CachedCompile") == 2


def test_no_workers_compile_in_process_with_one_warning(workers, monkeypatch, caplog):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    x = torch.randn(3, 3)
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        assert torch.allclose(_graph(x, 5.0), (x * 5.0).tanh() + 1, atol=1e-6)
        assert torch.allclose((x.to("lazy") - 1).exp().cpu(), (x - 1).exp(), atol=1e-6)
    assert caplog.text.count("compile workers cannot start") == 1
    assert lm.metrics.counter_value("aten::tanh") == 0  # compiled, in this process
    assert lm.metrics.counter_value("UncachedCompile") == 2


def test_a_worker_imports_its_parents_lazy_mlir_in_any_directory(tmp_path, monkeypatch):
    """Started in a directory holding another lazy_mlir (a second checkout),
    a worker still imports this one: a worker of another version would
    decompose this one's graphs by its own rules."""
    decoy = tmp_path / "lazy_mlir"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the lazy_mlir of the cwd')\n")
    monkeypatch.chdir(tmp_path)
    worker = compile_pool._Worker()  # raises WorkerUnavailable if it imported the decoy
    worker.stop()
