"""Background compiles (compile_service/lookup.py): a miss runs its graph
eagerly while a worker compiles it; a later run of the graph is compiled.
Results are eager PyTorch's before and after the switch, and data crosses
between eagerly run and compiled graphs both ways."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.compile_service import compile_pool
from lazy_mlir.compile_service.memory_cache import memory_cache
from lazy_mlir.compile_service.lookup import compiles_in_flight, wait_for_compiles
from e2e_helpers import train_classifier


@pytest.fixture
def background(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    compile_pool.reset()
    memory_cache.clear()
    lm.metrics.reset()
    yield
    wait_for_compiles()
    compile_pool.reset()


def test_training_switches_to_compiled_with_eagers_results(background):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    batches = [(torch.randn(8, 10), torch.randint(0, 4, (8,))) for _ in range(5)]
    expected = train_classifier(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), batches,
                      "cpu")
    model.to("lazy")
    in_flight = []

    def settle_after_first(i):
        in_flight.append(compiles_in_flight())
        if i == 1:
            wait_for_compiles()

    got = train_classifier(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), batches,
                 "lazy", settle_after_first)
    assert got == pytest.approx(expected, rel=1e-5, abs=1e-6)
    eager_runs = lm.metrics.counter_value("EagerWhileCompiling")
    assert eager_runs >= 2  # the first steps ran eagerly ...
    assert lm.metrics.counter_value("CachedCompile") >= 2  # ... the last ones compiled
    assert in_flight[0] >= 1 and in_flight[-1] == 0
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::")]  # no fallback
    assert lm.metrics.counter_value("EagerGraph") == 0  # (runs while compiling are not failures)
    # Compiled results feed a graph run eagerly while it compiles (device -> host).
    x = torch.randn(3, 10)
    out = model(x.to("lazy")).softmax(-1).cpu()
    with torch.no_grad():
        assert torch.allclose(out, ref(x).softmax(-1), atol=1e-5)


SCRIPT = textwrap.dedent("""
    import json, torch, lazy_mlir as lm
    from lazy_mlir.compile_service.lookup import wait_for_compiles
    x = torch.arange(12.0).reshape(3, 4)
    r = ((x.to('lazy') * 2).sin() + 1).cpu()
    wait_for_compiles()
    print(json.dumps({"ok": torch.allclose(r, (x * 2).sin() + 1),
                      "compiles": lm.metrics.counter_value("UncachedCompile")}))
""")


def test_workers_fill_the_persistent_cache(tmp_path):
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(tmp_path), LAZY_MLIR_COMPILE="background",
               LAZY_MLIR_COMPILE_WORKERS="1")
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs == [{"ok": True, "compiles": 1}, {"ok": True, "compiles": 0}]


EXIT_EARLY = textwrap.dedent("""
    import json, sys, time, torch, lazy_mlir as lm
    from lazy_mlir.compile_service import compile_pool
    x = torch.arange(12.0).reshape(3, 4)
    a = ((x.to('lazy') * 2).sin() + 1).cpu()   # graph A: its compile starts
    if sys.argv[1] == "compiling":  # A reaches the worker, which compiles it (5 s or more)
        pool = compile_pool.pool()
        while not any(w.job is not None for w in pool._workers):
            time.sleep(0.05)
    b = ((x.to('lazy') - 3).cos() * 2).cpu()   # graph B: queued behind A
    print(json.dumps({"ok": torch.allclose(a, (x * 2).sin() + 1) and
                            torch.allclose(b, (x - 3).cos() * 2),
                      "compiles": lm.metrics.counter_value("UncachedCompile"),
                      "hits": lm.metrics.counter_value("PersistentCacheHit")}))
""")  # ... and exits at once, without waiting for either compile


def _cached_modules(root) -> list:
    return sorted((root / "modules").glob("*/*.vmfb")) if (root / "modules").exists() else []


@pytest.mark.parametrize("when", [
    pytest.param("starting", marks=pytest.mark.slow),  # (the same spool, handed to a new worker)
    "compiling"])
def test_a_process_exiting_without_waiting_leaves_its_modules_in_the_cache(tmp_path, when):
    """The compiles of a process that exits before they finish are stored by
    its compile worker, which outlives it (the one compiling, and the graphs
    queued behind it), so the next process compiles nothing; the exiting
    process is not kept waiting for them, even by a caller reading its output."""
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(tmp_path), LAZY_MLIR_COMPILE="background",
               LAZY_MLIR_COMPILE_WORKERS="1")
    go = tmp_path / "go"  # (its worker compiles once the test has seen it return)
    first = subprocess.run([sys.executable, "-c", EXIT_EARLY, when], capture_output=True,
                           text=True, timeout=600,
                           env=dict(env, LAZY_MLIR_TEST_WORKER_DELAY=f"until:{go}"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout.strip().splitlines()[-1]) == {"ok": True, "compiles": 2,
                                                                 "hits": 0}
    assert _cached_modules(tmp_path) == []  # returned while its worker still compiles
    go.touch()
    deadline = time.monotonic() + 300
    while len(_cached_modules(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(_cached_modules(tmp_path)) == 2
    second = subprocess.run([sys.executable, "-c", EXIT_EARLY, "starting"], capture_output=True,
                            text=True, timeout=600, env=env)
    assert second.returncode == 0, second.stderr[-2000:]
    assert json.loads(second.stdout.strip().splitlines()[-1]) == {"ok": True, "compiles": 0,
                                                                  "hits": 2}
