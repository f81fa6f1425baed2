"""One OpenMP team per process, and PyTorch's host calls on its full width.

PyTorch's kernels that modules call from the host (``host_blas``'s
``torch.mm``, ``host_rnn``'s oneDNN LSTM) run on the thread that runs the
job. libgomp gives each thread that opens a parallel region its own team of
workers, and once the threads of all teams outnumber the cores it throttles
every team's spin-wait at barriers to ~1,000 iterations (``GOMP_SPINCOUNT``'s
throttled value; libgomp compares ``gomp_managed_threads`` with the cores at
every wait), so each worker sleeps between regions and is woken by a futex.
oneDNN's LSTM opens a region per time step: measured on the suite's medium
LSTM, 2 cores, the same arguments in one process, its backward took 34 ms
before lazy-mlir's run thread had computed anything and 60-67 ms after (the
run thread's team of two plus the main thread's); the replayed step 490
against 297 ms with the run thread on one thread. Eager PyTorch has one
team (the main thread's), which is what this keeps.

So the run thread (``run_queue``) sets its own OpenMP thread count to one when
it starts (``compute_on_one_thread``: ``omp_set_num_threads`` sets the
calling thread's ICV; PyTorch's MKL follows it; the process's other threads
and ``torch.get_num_threads()`` elsewhere are untouched; not MKL's own
``mkl_set_num_threads_local`` through ctypes: that crashed the process).

And a host call made on the run thread goes, through ``call``, to a thread
that is waiting for a job (``serve_until``: the main thread in
``step(); loss.item()``, or in ``wait_device_ops``), which runs it with its
own team (the process's one) while the run thread waits; with nobody
waiting, the run thread runs it itself on its one thread. The job itself
(IREE's dispatches) stays on the run thread. A call on any other thread
(the main thread running a job it took itself) runs in place. A hand-off
costs ~5.5 us of CPU (an empty call, measured); GPT-2 medium's step makes
75 calls, all served in the steps the run thread ran. The price: on a
machine loaded past its cores a team of two loses to one thread (each
barrier waits for a preempted thread: the run thread's steps went from
~0.75 to ~1.3 s of CPU at load 9), as eager PyTorch's own steps do.
"""
from __future__ import annotations

import ctypes
import logging
import threading
import time

from ... import metrics

log = logging.getLogger("lazy_mlir")

_local = threading.local()  # .one_thread: this thread computes on one OpenMP thread
_lock = threading.Lock()
_changed = threading.Condition(_lock)  # a call was posted or finished, a server came or went, a job ended
_posted: list["_Call"] = []  # calls no server has taken yet, oldest first
_servers = [0]  # threads in ``serve_until``


def _symbol(path: str, name: str):
    try:
        return getattr(ctypes.CDLL(path), name)
    except (OSError, AttributeError):
        return None


def compute_on_one_thread() -> bool:
    """Limit the calling thread's OpenMP parallelism to one thread;
    True when OpenMP's was set. ``call`` on this thread then hands its
    work to a waiting thread when there is one."""
    import torch
    torch.get_num_threads()  # ATen's per-thread init first: it would undo ours later
    omp = _symbol("libgomp.so.1", "omp_set_num_threads")
    if omp is None:
        log.debug("lazy-mlir: no libgomp: the run thread keeps its OpenMP threads")
        return False
    omp(ctypes.c_int(1))
    _local.one_thread = True
    return True


class _Call:
    __slots__ = ("fn", "args", "taken", "done", "value", "error")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.taken = self.done = False
        self.value = self.error = None

    def run(self) -> None:
        try:
            self.value = self.fn(*self.args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            self.error = e
        self.fn = self.args = None


def call(fn, *args):
    """``fn(*args)`` (PyTorch kernels a module calls from the host) with the
    process's OpenMP team: here, unless this thread computes on one thread
    and another waits for a job (``serve_until``), which then runs it while
    this one waits. ``fn``'s error is raised here either way. Wrap every
    host call a module makes with it (``host_blas``, ``host_rnn``,
    ``host_attention``)."""
    if not getattr(_local, "one_thread", False):
        return fn(*args)
    with _lock:
        if not _servers[0]:
            c = None
        else:
            c = _Call(fn, args)
            _posted.append(c)
            _changed.notify_all()
            while not c.done:
                if not c.taken and not _servers[0]:  # the servers left first: take it back
                    _posted.remove(c)
                    break
                _changed.wait()
    if c is None or not c.done:
        metrics.counter_inc("HostCallOnOneThread")
        return fn(*args)
    metrics.counter_inc("HostCallServed")
    if c.error is not None:
        raise c.error
    return c.value


def on_team(method):
    """``method`` of an ``iree.runtime.PyModuleInterface`` state (a host
    call's implementation: ``method(self, *args)``) made to run through
    ``call``; export this instead of ``method``."""
    def on_the_team(self, *args):
        return call(method, self, *args)
    on_the_team.__name__ = getattr(method, "__name__", "on_the_team")
    return on_the_team


def serve_until(done, timeout: float | None = None) -> bool:
    """Wait until ``done()`` (a job the caller waits for: ``job_ended`` is
    called when any ends) or ``timeout`` seconds, meanwhile running the host
    calls the run thread posts; ``done()``'s last answer. A thread that
    computes on one thread only waits."""
    serving = not getattr(_local, "one_thread", False)
    deadline = None if timeout is None else time.monotonic() + timeout
    with _lock:
        if serving:
            _servers[0] += 1
        try:
            while True:
                if serving and _posted:
                    c = _posted.pop(0)
                    c.taken = True
                    _lock.release()
                    try:
                        c.run()
                    finally:
                        _lock.acquire()
                        c.done = True
                        _changed.notify_all()
                    continue
                if done():
                    return True
                if deadline is None:
                    _changed.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    _changed.wait(left)
        finally:
            if serving:
                _servers[0] -= 1
                _changed.notify_all()  # a caller whose call nobody took runs it itself


def job_ended() -> None:
    """Wake the threads in ``serve_until`` to look at their ``done()`` again."""
    with _lock:
        _changed.notify_all()


def servers() -> int:
    """How many threads serve host calls now (tests wait for one)."""
    return _servers[0]
