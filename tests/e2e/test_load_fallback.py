"""A module that compiles but cannot be LOADED falls back like a failed
compile: the graph runs eagerly (counted), never an exception in the step.

The failures are real ones of IREE's runtime: a dispatch over its 32-buffer
limit (tests/e2e/test_cache_fallback.py), and here a damaged vmfb, cut short
after a real compile, given to the real loader (through the disk cache, whose
checksum it passes, and straight to ``load_executable``)."""
from __future__ import annotations

import logging
from dataclasses import replace

import torch

import lazy_mlir as lm
from lazy_mlir.config import current_config
from lazy_mlir.graph.program import Graph
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.compile_service.executable import EagerExecutable
from lazy_mlir.pipeline.compile import compile_graph
from lazy_mlir.compile_service import lookup
from lazy_mlir.compile_service.memory_cache import memory_cache
from lazy_mlir.compile_service.compile_worker import pack_entry, unpack_entry
from lazy_mlir.compile_service.disk_cache import default_cache
from lazy_mlir.targets import get_target

from e2e_helpers import assert_lazy_close, lazy


def _graph_result(seed: int):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(5, 7, generator=g), torch.randn(5, 7, generator=g)
    return (lazy(x) * 3 + lazy(y)).tanh(), (x * 3 + y).tanh()


def _damaged(vmfb: bytes) -> bytes:
    return vmfb[: len(vmfb) // 3]


def test_damaged_cached_module_is_compiled_again(counters, monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("LAZY_MLIR_CACHE_DIR", str(tmp_path))
    disk = default_cache()
    out, expected = _graph_result(1)
    assert_lazy_close(out, expected)  # compiled, stored
    keys = [e["key"] for e in disk.entries()]
    assert len(keys) == 1
    clobbered, passthrough, vmfb = unpack_entry(disk.get(keys[0]))
    disk.put(keys[0], pack_entry(clobbered, passthrough, _damaged(vmfb)))  # a valid checksum
    memory_cache.clear()
    counters.snapshot()
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        out, expected = _graph_result(2)
        assert_lazy_close(out, expected)
    assert counters.delta("ModuleLoadFailed") == 1
    assert counters.delta("UncachedCompile") == 1  # compiled again, not run eagerly
    assert "cannot load a cached module" in caplog.text
    memory_cache.clear()
    counters.snapshot()
    out, expected = _graph_result(3)
    assert_lazy_close(out, expected)
    assert counters.delta("PersistentCacheHit") == 1  # the entry was replaced by a good one
    assert counters.delta("ModuleLoadFailed") == 0


def test_module_that_cannot_load_runs_eagerly_with_one_warning(counters, caplog, monkeypatch):
    monkeypatch.setattr(lookup, "_load_warned", set())  # (the test above warned already)
    out, _ = _graph_result(4)
    graph = Graph.build([value_of(out)])
    target, config = get_target("cpu"), current_config()
    compiled = compile_graph(graph, target, config)
    assert not isinstance(lookup.load_executable(compiled, graph, target), EagerExecutable)
    broken = replace(compiled, compiled=replace(compiled.compiled, vmfb=_damaged(compiled.vmfb)))
    counters.snapshot()
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        entries = [lookup.load_executable(broken, graph, target) for _ in range(2)]
    assert all(isinstance(e, EagerExecutable) for e in entries)
    assert set(entries[0].ops) == {n.op.__name__.split(".")[0] for n in graph.nodes}
    assert counters.delta("ModuleLoadFailed") == 2
    assert caplog.text.count("cannot load this graph") == 1  # once per kind of error
    lm.mark_step()
