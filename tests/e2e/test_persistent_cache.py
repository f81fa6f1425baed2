"""The persistent compiled-module cache, across processes."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import lazy_mlir as lm  # noqa: F401  (registers the lazy device)
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.graph.program import Graph
from lazy_mlir.config import PipelineConfig
from lazy_mlir.compile_service.disk_cache import make_key

SCRIPT = textwrap.dedent("""
    import json, torch, torch.nn.functional as F, lazy_mlir as lm
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 12), torch.tensor([0, 1, 2, 1])
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to("lazy")), y.to("lazy"))
        loss.backward(); opt.step(); lm.mark_step()
        losses.append(loss.item())
    names = ["UncachedCompile", "PersistentCacheHit", "PersistentCacheCorrupt"]
    print(json.dumps({"losses": losses, **{n: lm.metrics.counter_value(n) for n in names}}))
""")


def _run(cache_dir, **env):
    e = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(cache_dir), **env)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=e, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold_run(tmp_path_factory):
    """One process's run on an empty cache: (its cache directory, its result).
    Tests work on copies of the directory."""
    cache = tmp_path_factory.mktemp("cold-cache")
    first = _run(cache)
    assert first["UncachedCompile"] >= 1 and first["PersistentCacheHit"] == 0
    return cache, first


def _copy_of(cold, tmp_path):
    shutil.copytree(cold, tmp_path / "cache")
    return tmp_path / "cache"


def test_second_process_compiles_nothing(cold_run, tmp_path):
    cold, first = cold_run
    cache = _copy_of(cold, tmp_path)
    second = _run(cache)
    assert second["UncachedCompile"] == 0
    assert second["PersistentCacheHit"] == first["UncachedCompile"]
    assert second["losses"] == first["losses"]


def test_corrupt_entry_is_rebuilt_not_executed(cold_run, tmp_path):
    cold, first = cold_run
    cache = _copy_of(cold, tmp_path)
    for path in (cache / "modules").rglob("*.vmfb"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    second = _run(cache)
    assert second["PersistentCacheCorrupt"] == first["UncachedCompile"]
    assert second["UncachedCompile"] == first["UncachedCompile"]
    assert second["losses"] == first["losses"]
    assert _run(cache)["UncachedCompile"] == 0  # rebuilt entries are good


def test_cache_off(tmp_path):
    _run(tmp_path, LAZY_MLIR_CACHE="0")
    assert not (tmp_path / "modules").exists()


def test_distinct_graphs_never_share_an_entry():
    x = torch.ones(3).to("lazy")

    def key(t, config=PipelineConfig()):
        return make_key(Graph.build([value_of(t)]).key, "cpu", config.key)

    keys = {
        key(x + 0),  # constants 0 and 1 stay in the graph
        key(x + 1),
        key(x.double() + 0),
        key(torch.ones(4).to("lazy") + 0),
        key(x + 0, PipelineConfig(linalg_after=("canonicalize",))),
    }
    assert len(keys) == 5
