"""The compile service (``compile_service/``) is the one entry of every way
in: the Dynamo backend compiles in the background as the lazy device does
(its aot graphs run eagerly until their modules are ready), both keep the same
``Executable`` kinds in the one memory cache, and the lazy device and the
Dynamo backend share one entry for the same graph; a compile in flight in
another process is awaited, not repeated."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo

import lazy_mlir as lm
from lazy_mlir.compile_service import compile_pool, lookup
from lazy_mlir.compile_service.executable import (COMPILING, LOADED, CompilingExecutable,
                                                  Executable)
from lazy_mlir.compile_service.memory_cache import memory_cache
from lazy_mlir.frontends import dynamo


@pytest.fixture(autouse=True)
def _fresh():
    dynamo.register()
    torch._dynamo.reset()
    memory_cache.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def background(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE_WORKERS", "1")
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    compile_pool.reset()
    yield
    lookup.wait_for_compiles()
    compile_pool.reset()


def _count(name: str) -> int:
    return lm.metrics.counter_value(name)


def _entries() -> list:
    """The distinct entries of the memory cache (one may be under two keys)."""
    return list({id(e): e for e in memory_cache._entries.values()}.values())


def test_dynamo_graph_runs_eagerly_until_its_module_is_ready(background):
    fn = torch.compile(lambda a, b: torch.tanh(a @ b) * 2, backend="lazy_mlir")
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    want = torch.tanh(a @ b) * 2
    before = {n: _count(n) for n in ("EagerWhileCompiling", "DynamoEagerGraph", "CachedCompile")}
    torch.testing.assert_close(fn(a, b), want)  # the miss: submitted, run eagerly
    (entry,) = _entries()
    assert isinstance(entry, CompilingExecutable) and entry.state == COMPILING
    assert _count("EagerWhileCompiling") > before["EagerWhileCompiling"]
    lookup.wait_for_compiles()
    torch.testing.assert_close(fn(a, b), want, rtol=1e-5, atol=1e-6)  # settled: compiled
    (entry,) = _entries()
    assert entry.state == LOADED and isinstance(entry, Executable)
    assert _count("CachedCompile") == before["CachedCompile"] + 1
    assert _count("DynamoEagerGraph") == before["DynamoEagerGraph"]  # not a fallback
    torch.testing.assert_close(fn(a, b), want, rtol=1e-5, atol=1e-6)
    assert _count("CachedCompile") == before["CachedCompile"] + 1  # no lookup once loaded


def test_lazy_device_and_dynamo_share_one_entry_for_one_graph(monkeypatch, tmp_path):
    monkeypatch.setenv("LAZY_MLIR_CACHE_DIR", str(tmp_path))  # (compiled here, not loaded)

    def f(a, b):
        return torch.tanh(a @ b)

    a, b = torch.randn(6, 9), torch.randn(9, 4)  # sizes no other test compiles
    out = f(a.to("lazy"), b.to("lazy"))
    lm.mark_step()
    torch.testing.assert_close(out.cpu(), f(a, b), rtol=1e-5, atol=1e-6)
    (lazy_entry,) = _entries()
    assert lazy_entry.state == LOADED
    uncached = _count("UncachedCompile")
    with torch.no_grad():  # (an inference graph: the same computation)
        got = torch.compile(f, backend="lazy_mlir")(a, b)
    torch.testing.assert_close(got, f(a, b), rtol=1e-5, atol=1e-6)
    assert _count("UncachedCompile") == uncached  # found, not compiled again
    assert _entries() == [lazy_entry]  # one entry, under the lazy and the fx key
    assert len(memory_cache._entries) == 3  # (and the Dynamo graph's key)


RUN_TWICE = textwrap.dedent("""
    import json, sys, threading, time, torch, lazy_mlir as lm
    from lazy_mlir.compile_service import compile_pool, lookup
    x = torch.arange(12.0).reshape(3, 4)
    if sys.argv[1] == "wait":  # the first run's worker compiles once we await it
        def release():
            while not lm.metrics.counter_value("CompileAwaitedElsewhere"):
                time.sleep(0.05)
            open(sys.argv[2], "w").close()
        threading.Thread(target=release, daemon=True).start()
    a = ((x.to('lazy') * 2).sin() + 1).cpu()  # a miss: compiled in the background
    if sys.argv[1] == "leave":  # exit while the worker compiles it (it stores it later)
        pool = compile_pool.pool()
        while not any(w.job is not None for w in pool._workers):
            time.sleep(0.05)
    else:
        lookup.wait_for_compiles()
    print(json.dumps({"ok": bool(torch.allclose(a, (x * 2).sin() + 1)),
                      **{k: lm.metrics.counter_value(n) for k, n in (
                          ("compiles", "UncachedCompile"), ("awaited", "CompileAwaitedElsewhere"),
                          ("hits", "PersistentCacheHit"))}}))
""")


def test_a_compile_in_flight_in_another_process_is_awaited_not_repeated(tmp_path):
    """A program run twice in a row: the second run waits for the module
    the first run's orphaned worker is still compiling (its mark in the cache
    directory) instead of compiling the graph again. (That worker starts
    compiling only once the second run awaits it, whatever the machine's load.)"""
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(tmp_path), LAZY_MLIR_COMPILE="background",
               LAZY_MLIR_COMPILE_WORKERS="1")
    runs = []
    go = tmp_path / "awaited"
    for how, extra in (("leave", {"LAZY_MLIR_TEST_WORKER_DELAY": f"until:{go}"}), ("wait", {})):
        out = subprocess.run([sys.executable, "-c", RUN_TWICE, how, str(go)], capture_output=True,
                             text=True, timeout=600, env=dict(env, **extra))
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0] == {"ok": True, "compiles": 1, "awaited": 0, "hits": 0}
    assert runs[1] == {"ok": True, "compiles": 0, "awaited": 1, "hits": 1}
