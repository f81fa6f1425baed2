"""The run queue (runtime/run_queue.py): jobs run one at a time, in launch order, whichever
thread runs them (the worker, or a thread waiting for a job not started)."""
from __future__ import annotations

import threading
import time

import pytest

from lazy_mlir.runtime import run_queue


def _tracker():
    log, active, overlaps = [], [0], []
    lock = threading.Lock()

    def job(name, seconds=0.0, event=None):
        with lock:
            active[0] += 1
            if active[0] > 1:
                overlaps.append(name)
        if event is not None:
            event.wait(5)
        time.sleep(seconds)
        log.append((name, threading.current_thread().name))
        with lock:
            active[0] -= 1
        return name

    return job, log, overlaps


def test_waiting_for_a_later_job_keeps_launch_order_and_one_at_a_time():
    job, log, overlaps = _tracker()
    release = threading.Event()
    first = run_queue.submit(job, "a", 0.0, release)
    time.sleep(0.05)  # the worker has started "a" and waits for the event
    later = [run_queue.submit(job, n, 0.01) for n in "bcd"]
    threading.Timer(0.2, release.set).start()
    assert later[-1].result(timeout=10) == "d"  # may run "b".."d" here, after "a"
    assert first.result() == "a"
    assert [n for n, _ in log] == ["a", "b", "c", "d"]
    assert overlaps == []


def test_a_waiting_thread_may_run_the_next_job_itself():
    job, log, overlaps = _tracker()
    futures = [run_queue.submit(job, n, 0.005) for n in range(20)]
    for f in futures:
        f.result(timeout=10)
    assert [n for n, _ in log] == list(range(20))
    assert overlaps == []
    run_queue.wait_all()


def test_errors_reach_the_reader_and_the_next_sync_point_once():
    def boom():
        raise ValueError("boom in a job")

    f = run_queue.submit(boom)
    with pytest.raises(ValueError, match="boom in a job"):
        f.result(timeout=10)
    with pytest.raises(ValueError, match="boom in a job"):
        run_queue.raise_pending_error()
    run_queue.raise_pending_error()  # reported once


def test_wait_all_runs_queued_jobs():
    job, log, _ = _tracker()
    for n in range(5):
        run_queue.submit(job, n)
    run_queue.wait_all()
    assert [n for n, _ in log] == list(range(5))


def test_an_inline_job_runs_here_when_the_worker_is_idle():
    job, log, _ = _tracker()
    run_queue.wait_all()
    f = run_queue.submit(job, "now", inline=True)
    assert f.done() and f.result() == "now"
    assert log == [("now", threading.current_thread().name)]


def test_an_inline_job_waits_its_turn_behind_a_running_one():
    job, log, overlaps = _tracker()
    release = threading.Event()
    first = run_queue.submit(job, "a", 0.0, release)
    time.sleep(0.05)  # the worker runs "a"
    second = run_queue.submit(job, "b", inline=True)
    assert not second.done()  # queued, not run beside "a"
    release.set()
    assert second.result(timeout=10) == "b" and first.result() == "a"
    assert [n for n, _ in log] == ["a", "b"] and overlaps == []


def test_an_inline_jobs_error_waits_for_the_reader():
    def boom():
        raise ValueError("boom inline")

    run_queue.wait_all()
    f = run_queue.submit(boom, inline=True)  # does not raise here
    with pytest.raises(ValueError, match="boom inline"):
        run_queue.raise_pending_error()
    with pytest.raises(ValueError, match="boom inline"):
        f.result()


class _Input:
    """Stands for a graph input only the job holds (a step's batch)."""


def test_a_job_releases_its_arguments_before_it_is_done():
    """A thread woken by the future (``wait_device_ops``) must not find the
    job still holding its inputs: the done callbacks run the moment the
    future completes, in the thread that ran the job (the worker here: the
    job waits until the callback is attached). (A failed job's traceback
    keeps its frames, and their inputs, until it is reported.)"""
    import weakref

    attached = threading.Event()

    def use(x):
        attached.wait(5)
        return 1

    run_queue.wait_all()
    x = _Input()
    alive = weakref.ref(x)
    held_when_done = []
    f = run_queue.submit(use, x)
    del x
    f.add_done_callback(lambda _: held_when_done.append(alive() is not None))
    attached.set()
    f.result()
    run_queue.wait_all()
    assert held_when_done == [False]


def test_a_finished_job_is_read_without_its_lock():
    """Each step's graph waits for every input the previous one made: a job
    that ran without error answers ``result`` without taking the future's
    lock (a lock that raises proves it); one that failed still raises."""
    class NoLock:
        def __enter__(self):
            raise AssertionError("the future's lock was taken")

        def __exit__(self, *exc):
            return False

    ok = run_queue.submit(lambda: 42)
    assert ok.result(timeout=10) == 42
    ok._condition = NoLock()
    assert ok.result() == 42 and ok.result() == 42

    def boom():
        raise ValueError("boom in a job")

    bad = run_queue.submit(boom)
    with pytest.raises(ValueError, match="boom in a job"):
        bad.result(timeout=10)
    with pytest.raises(ValueError, match="boom in a job"):
        run_queue.raise_pending_error()


def test_the_run_thread_opens_no_second_openmp_team():
    """The run thread computes PyTorch's kernels on one OpenMP thread
    (``one_team``): a second team would throttle the main thread's at every
    barrier. The main thread keeps its thread count."""
    import torch
    main_threads = torch.get_num_threads()
    fut = run_queue.submit(lambda: (threading.current_thread().name, torch.get_num_threads()))
    deadline = time.monotonic() + 10
    while not fut.done() and time.monotonic() < deadline:  # (not result(): it would run it here)
        time.sleep(0.01)
    name, threads = fut.result()
    assert name == "lazy-mlir"
    assert threads == 1
    assert torch.get_num_threads() == main_threads
