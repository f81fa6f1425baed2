"""Asynchronous mark_step, worker errors, and release of dead device buffers."""
from __future__ import annotations

import collections
import gc
import threading
import time

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.graph import ir
from lazy_mlir.lazy import sync
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.models.seed import MnistCNN


@pytest.fixture
def slow_worker(monkeypatch):
    """Make every graph run take at least 0.5 s, and count runs in flight."""
    monkeypatch.setattr(sync, "INLINE_BELOW_SECONDS", 0.0)  # a cached graph's run was short
    original = sync._run
    started = threading.Event()

    def slow(*args):
        started.set()
        time.sleep(0.5)
        return original(*args)

    monkeypatch.setattr(sync, "_run", slow)
    return started


def test_mark_step_returns_before_the_graph_has_run(slow_worker):
    x = torch.arange(6.0).to("lazy")
    y = x * 3 + 1
    t0 = time.perf_counter()
    lm.mark_step()
    launched = time.perf_counter() - t0
    z = y * 2  # tracing goes on while the graph runs
    assert slow_worker.wait(5)
    assert launched < 0.4 + _compile_time()
    t0 = time.perf_counter()
    lm.wait_device_ops()
    assert time.perf_counter() - t0 > 0.05  # it really was still running
    torch.testing.assert_close(y.cpu(), torch.arange(6.0) * 3 + 1)
    torch.testing.assert_close(z.cpu(), (torch.arange(6.0) * 3 + 1) * 2)


def test_a_graph_that_ran_short_runs_in_the_calling_thread(monkeypatch):
    """No hand-off for a graph whose last run was short; one that was long
    (or has not run) goes to the worker and mark_step returns at once."""
    threads = []
    original = sync._run

    def record(*args):
        threads.append(threading.current_thread().name)
        return original(*args)

    monkeypatch.setattr(sync, "_run", record)
    x = torch.arange(6.0).to("lazy")
    for _ in range(3):
        x = x * 3 + 1
        lm.mark_step()
        lm.wait_device_ops()
    assert threads[1:] == [threading.current_thread().name] * 2
    monkeypatch.setattr(sync, "INLINE_BELOW_SECONDS", 0.0)
    x = x * 3 + 1
    lm.mark_step()
    future = value_of(x).data.future
    while not future.done():  # not future.result(): that may run the job here
        time.sleep(0.01)
    assert threads[-1] == "lazy-mlir"
    torch.testing.assert_close(x.cpu(), _ref(4))


def _ref(n):
    v = torch.arange(6.0)
    for _ in range(n):
        v = v * 3 + 1
    return v


def _compile_time():
    n, total, _ = lm.metrics.metric_data("CompileTime")
    return total


def test_worker_error_surfaces_at_next_sync_with_original_message(monkeypatch):
    def boom(*args):
        raise ValueError("device lost in the worker")

    monkeypatch.setattr(sync, "_run", boom)
    x = torch.ones(3).to("lazy")
    y = x + 5
    lm.mark_step()  # returns: the error happens in the worker
    with pytest.raises(ValueError, match="device lost in the worker") as info:
        y.cpu()
    assert any(f.name == "boom" for f in info.traceback)
    with pytest.raises(ValueError, match="device lost"):
        lm.wait_device_ops()
    monkeypatch.undo()
    lm.wait_device_ops()  # reported once, then the device is usable again
    w = torch.ones(3).to("lazy") * 4
    lm.mark_step()
    torch.testing.assert_close(w.cpu(), torch.full((3,), 4.0))


def test_reading_one_value_waits_only_for_its_graph():
    a = torch.ones(4).to("lazy") * 2
    lm.mark_step()
    assert a.cpu().tolist() == [2.0] * 4


def _live_device_buffers() -> collections.Counter:
    """The live device buffers (and those still being computed), by spec."""
    gc.collect()
    return collections.Counter(d.spec.signature() for d in list(ir.live_data)
                               if d.device is not None or d.future is not None)


def _mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 10), torch.nn.LogSoftmax(-1))


# CI: an MLP (the CNN's three step graphs took ~45 s of compiling on 2 cores)
@pytest.mark.parametrize("steps,make", [(12, _mlp), pytest.param(500, MnistCNN,
                                                                  marks=pytest.mark.slow)])
def test_device_buffers_of_dead_tensors_are_released(steps, make):
    torch.manual_seed(0)
    model = make().to("lazy")
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    x, y = torch.randn(2, 1, 28, 28), torch.randint(0, 10, (2,))
    counts = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.nll_loss(model(x.to("lazy")), y.to("lazy"))
        loss.backward()
        opt.step()
        lm.mark_step()
        loss.item()
        if step >= 3:
            lm.wait_device_ops()
            counts.append(_live_device_buffers())
    # On a failure, say which buffers came or went (the total alone does not tell).
    changes = [(step, dict(c - counts[0]), dict(counts[0] - c))
               for step, c in enumerate(counts, start=3) if c != counts[0]]
    assert not changes, f"(step, buffers added, buffers gone) against step 3: {changes}"
