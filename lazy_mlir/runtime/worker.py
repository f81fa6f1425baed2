"""The background worker that runs compiled graphs in launch order.

``mark_step`` compiles (on a miss) in the caller's thread and hands the run to
this worker, so tracing the next step overlaps the previous step's execution.
One worker and a FIFO queue: a graph's inputs made by earlier graphs are ready
when it starts. A job's error is kept in its future; reading any of its
outputs, or the next sync point, re-raises it with the original traceback.
"""
from __future__ import annotations

import concurrent.futures
import threading

_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_last: concurrent.futures.Future | None = None
_unreported: list[concurrent.futures.Future] = []


def submit(fn, *args) -> concurrent.futures.Future:
    global _pool, _last
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lazy-mlir")
        fut = _pool.submit(fn, *args)
        _last = fut
        _unreported.append(fut)
    # Outside the lock: a job that is already done runs the callback here.
    fut.add_done_callback(_forget_if_ok)
    return fut


def _forget_if_ok(fut) -> None:
    if fut.exception() is None:
        with _lock:
            if fut in _unreported:
                _unreported.remove(fut)


def wait_all() -> None:
    """Block until every launched job has finished; raise the first error
    not yet reported (once)."""
    last = _last
    if last is not None:
        concurrent.futures.wait([last])
    raise_pending_error()


def raise_pending_error() -> None:
    with _lock:
        failed = [f for f in _unreported if f.done() and f.exception() is not None]
        for f in failed:
            _unreported.remove(f)
    if failed:
        failed[0].result()  # re-raises the worker's exception with its traceback
