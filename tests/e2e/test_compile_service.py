"""The compile service (``compile_service/``) is the one entry of every way
in: the Dynamo backend compiles in the background as the lazy device does
(its aot graphs run eagerly until their modules are ready), both keep the same
``Executable`` kinds in the one memory cache, and the lazy device and the
Dynamo backend share one entry for the same graph."""
from __future__ import annotations

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
