"""The storm guard (``compile_service/first_sight.py``): past
``LAZY_MLIR_UNUSED_COMPILES`` compiled graphs that never ran again, a new
graph runs eagerly at its first sight (by ``pipeline/eager_graph``, no fx
module) and compiles at its second; LBFGS, whose host reads make new graphs
while its history grows, trains like eager."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.compile_service import compile_pool, first_sight
from lazy_mlir.compile_service.lookup import wait_for_compiles
from lazy_mlir.compile_service.memory_cache import memory_cache
from lazy_mlir.pipeline.eager_graph import eager_runner
from lazy_mlir.pipeline.fx_graph import to_fx
from e2e_helpers import captured_backward_graph, lazy


@pytest.fixture
def storm(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "background")
    monkeypatch.setenv("LAZY_MLIR_UNUSED_COMPILES", "2")
    monkeypatch.setenv("LAZY_MLIR_CACHE", "0")
    memory_cache.clear()
    first_sight.forget()
    yield
    wait_for_compiles()
    compile_pool.reset()
    first_sight.forget()


def _counts():
    return {n: lm.metrics.counter_value(n) for n in ("UncachedCompile", "EagerFirstSight")}


def test_past_the_limit_a_graph_compiles_at_its_second_sight(storm):
    x = torch.randn(5)
    before = _counts()
    for op in (torch.sin, torch.cos):  # compiled at first sight, never run again
        torch.testing.assert_close(op(lazy(x)).cpu(), op(x))
    exp = torch.exp(lazy(x)).cpu()  # the third: the limit reached, runs eagerly
    after = _counts()
    assert after["UncachedCompile"] - before["UncachedCompile"] == 2
    assert after["EagerFirstSight"] - before["EagerFirstSight"] == 1
    torch.testing.assert_close(exp, torch.exp(x))
    torch.testing.assert_close(torch.exp(lazy(x)).cpu(), torch.exp(x))  # its second sight
    assert _counts()["UncachedCompile"] - after["UncachedCompile"] == 1


def test_the_eager_runner_computes_what_the_fx_module_does(monkeypatch):
    graph = captured_backward_graph(monkeypatch)
    inputs = [torch.randn(d.spec.shape, dtype=d.spec.dtype) if d.spec.dtype.is_floating_point
              else torch.zeros(d.spec.shape, dtype=d.spec.dtype) for d in graph.inputs]
    for got, want in zip(eager_runner(graph)(*inputs), to_fx(graph)(*inputs)):
        torch.testing.assert_close(got, want)


def test_lbfgs_trains_like_eager_through_a_storm(storm):
    def train(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(),
                                torch.nn.Linear(8, 1)).to(device)
        x, y = torch.randn(16, 4).to(device), torch.randn(16, 1).to(device)
        opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=3, history_size=4)
        losses = []
        for _ in range(3):
            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(m(x), y)
                loss.backward()
                return loss
            losses.append(opt.step(closure).item())
            if device == "lazy":
                lm.mark_step()
        return losses
    before = _counts()
    assert train("lazy") == pytest.approx(train("cpu"), rel=1e-5)
    after = _counts()
    assert after["EagerFirstSight"] > before["EagerFirstSight"]
