"""One OpenMP team (``runtime/one_team``): the run thread computes on one
OpenMP thread, and a host call it makes while another thread waits for a
job runs on that thread, with the user's thread count; with nobody waiting
it runs on the run thread; its error reaches the reader either way."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from lazy_mlir import metrics
from lazy_mlir.host_calls.runtime import one_team
from lazy_mlir.runtime import run_queue


def _when(cond, seconds=10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _where():
    return threading.current_thread().name, torch.get_num_threads()


def _started_on_the_run_thread(job, *args):
    """``job(*args)`` submitted, and started by the run thread (a reader
    that came first would run it itself)."""
    run_queue.wait_all()
    started = threading.Event()

    def run():
        started.set()
        return job(*args)

    fut = run_queue.submit(run)
    assert started.wait(10)
    return fut


def _host_call_once_served(fn):
    """On the run thread: wait until a thread serves, then make a host call."""
    assert _when(lambda: one_team.servers() > 0)
    return _where(), one_team.call(fn)


def test_a_host_call_runs_on_the_waiting_thread_with_its_threads():
    users = torch.get_num_threads()
    served = metrics.counter_value("HostCallServed")
    fut = _started_on_the_run_thread(_host_call_once_served, _where)
    job_at, call_at = fut.result(timeout=20)
    assert job_at == ("lazy-mlir", 1)  # the job: on the run thread, one OpenMP thread
    assert call_at == (threading.current_thread().name, users)  # its host call: here, all of them
    assert metrics.counter_value("HostCallServed") == served + 1
    run_queue.wait_all()


def test_wait_device_ops_serves_host_calls_too():
    users = torch.get_num_threads()
    results = []
    _started_on_the_run_thread(lambda: results.append(_host_call_once_served(_where)))
    run_queue.wait_all()
    assert results == [(("lazy-mlir", 1), (threading.current_thread().name, users))]


def test_with_nobody_waiting_the_run_thread_makes_the_call_itself():
    fut = _started_on_the_run_thread(one_team.call, _where)
    assert _when(fut.done)  # (not result(): that would serve)
    assert fut.result() == ("lazy-mlir", 1)


def test_a_host_calls_error_reaches_the_reader():
    def boom():
        raise ValueError("boom in a host call")

    fut = _started_on_the_run_thread(_host_call_once_served, boom)
    with pytest.raises(ValueError, match="boom in a host call"):
        fut.result(timeout=20)
    with pytest.raises(ValueError, match="boom in a host call"):
        run_queue.raise_pending_error()


def test_a_reader_that_gives_up_leaves_no_call_behind():
    """A reader whose timeout ends stops serving; the run thread's next call
    then runs there, and the job ends."""
    go = threading.Event()

    def job():
        assert _when(lambda: one_team.servers() > 0)
        go.wait(10)
        assert _when(lambda: one_team.servers() == 0)
        return one_team.call(_where)

    fut = _started_on_the_run_thread(job)
    threading.Timer(0.05, go.set).start()
    with pytest.raises(TimeoutError):
        fut.result(timeout=0.3)
    assert _when(fut.done)
    assert fut.result() == ("lazy-mlir", 1)


def test_calls_off_the_run_thread_run_in_place():
    assert one_team.call(_where) == _where()
    box = []
    t = threading.Thread(target=lambda: box.append(one_team.call(_where)), name="user")
    t.start()
    t.join(10)
    assert box == [("user", torch.get_num_threads())]


def test_a_real_modules_torch_mm_is_served():
    """An IREE module's ``lazy_mlir_blas.matmul`` call, invoked on the run
    thread while this thread waits, runs here and computes torch's result."""
    import numpy as np

    from lazy_mlir.dialects.torch_import import parse
    from lazy_mlir.host_calls.passes import blas as hb
    from test_host_blas_rewrite import loaded, matmul, module

    m = parse(module(matmul("nn", [256, 512], [512, 192])))
    assert hb.matmuls_as_calls(m) == 1
    main = loaded(m, "local-task")
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(256, 512, generator=g), torch.randn(512, 192, generator=g)

    def run():
        assert _when(lambda: one_team.servers() > 0)
        return np.asarray(main(a.numpy(), b.numpy()).to_host())

    served = metrics.counter_value("HostCallServed")
    got = _started_on_the_run_thread(run).result(timeout=60)
    np.testing.assert_allclose(got, (a @ b).numpy(), rtol=1e-4, atol=1e-4)
    assert metrics.counter_value("HostCallServed") == served + 1


def test_host_calls_from_the_run_thread_start_no_openmp_threads():
    """One team: after the main thread's own parallel work, the run thread's
    host calls (served or made on its one thread) start no thread (a second
    OpenMP team would start its workers)."""
    import os
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("needs /proc to list threads")
    a = torch.randn(512, 512)
    torch.mm(a, a)  # the main thread's team exists
    ran = _started_on_the_run_thread(lambda: None)  # the run thread exists
    assert _when(ran.done)
    before = set(os.listdir("/proc/self/task"))
    fut = _started_on_the_run_thread(one_team.call, lambda: torch.mm(a, a))
    assert _when(fut.done)
    fut.result()
    _started_on_the_run_thread(_host_call_once_served, lambda: torch.mm(a, a)).result(timeout=20)
    assert set(os.listdir("/proc/self/task")) - before == set()
