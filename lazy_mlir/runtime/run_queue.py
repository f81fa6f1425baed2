"""The run queue: one background thread that runs compiled graphs in launch order.

``mark_step`` compiles (on a miss) in the caller's thread and hands the run to
this worker, so tracing the next step overlaps the previous step's execution.
One worker and a FIFO queue: a graph's inputs made by earlier graphs are ready
when it starts. A job's error is kept in its future; reading any of its
outputs, or the next sync point, re-raises it with the original traceback.

A thread that waits for a job nobody has started yet, while no job runs,
runs it itself (``Job.result``): in the common ``mark_step(); loss.item()``
the step then costs no hand-off to the worker and back, two thread wake-ups
that take milliseconds on a loaded machine. Jobs still run one at a time and
in launch order either way. A thread that waits for a job the run thread
runs serves that job's host calls meanwhile (``one_team``: the run thread
computes on one OpenMP thread, the waiting thread with the user's).

``submit(..., inline=True)`` runs a job in the caller's thread at once when
nothing is queued or running: for a graph that runs in well under a
millisecond the hand-off costs more than the run it could overlap.

The worker thread runs under ``SCHED_BATCH`` (``waiting``): woken by a
submit, it does not preempt the thread that submitted, which in
``step(); loss.item()`` then usually takes the job itself (one wake-up a
step instead of three: ResNet tiny's ``compile_train_step`` loop at load
~9 on 2 cores, median step 5.5-8.1 against 8.5-10.0 ms with only the waits
under ``SCHED_BATCH``). Where there is a free core it still starts at once.
(A device made by this thread is made under ``SCHED_OTHER``: IREE's
workers inherit the policy of the thread that starts them.)
"""
from __future__ import annotations

import collections
import concurrent.futures
import threading
import time

from ..host_calls.runtime import one_team
from . import waiting

_lock = threading.Lock()
_ready = threading.Condition(_lock)  # a job was queued, or the running one finished
_queue: collections.deque = collections.deque()  # jobs not started, in launch order
_running = [False]  # a job runs (on the worker or on a waiting thread)
_exiting = [False]  # the interpreter exits: the worker ends once the queue is empty
_thread: threading.Thread | None = None
_last: concurrent.futures.Future | None = None
_unreported: list[concurrent.futures.Future] = []


class Job(concurrent.futures.Future):
    """The future of one launched job; ``result`` may run it in place."""

    # Set once the job has run without error (after ``set_result``): then
    # ``result`` returns ``value`` without the future's lock. A step's graph
    # reads each output of the previous one (GPT-2 tiny: 112 of its 131
    # inputs), and two lock round trips apiece were ~0.2-0.3 ms of the run
    # thread's step, on the path ``loss.item()`` waits for.
    ok = False

    def __init__(self, fn, args):
        super().__init__()
        self.fn = fn
        self.args = args
        self.value = None

    def run(self) -> None:
        """Run the job (taken off the queue, with ``_running`` set)."""
        # The job lets go of its arguments before it is done: a thread woken by
        # the future (``wait_device_ops``) must find the inputs only the job
        # held (a step's batch) already released.
        fn, args = self.fn, self.args
        self.fn = self.args = None
        if self.set_running_or_notify_cancel():
            try:
                result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - kept for the reader
                del fn, args
                self.set_exception(e)
            else:
                del fn, args
                self.value = result
                self.set_result(result)
                self.ok = True
        with _lock:
            _running[0] = False
            if _queue or _exiting[0]:  # only then has the worker anything to do
                _ready.notify_all()
        one_team.job_ended()  # a waiting thread may take the next job, or return

    def result(self, timeout=None):
        """The job's value; a thread that waits for it runs it when it is
        next and nothing runs, and meanwhile serves the running job's host
        calls (``one_team``)."""
        if self.ok:
            return self.value
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if _take(self):
                self.run()
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            one_team.serve_until(lambda: self.done() or _takeable(self), left)
        return super().result(0 if deadline is not None else None)


def _takeable(job: Job) -> bool:
    """(Read without the lock: a hint, ``_take`` decides.)"""
    return not _running[0] and bool(_queue) and _queue[0] is job


def _take(job: Job) -> bool:
    """Take ``job`` off the queue to run it here, if it is next and nothing runs."""
    with _lock:
        if not _running[0] and _queue and _queue[0] is job:
            _queue.popleft()
            _running[0] = True
            return True
    return False


def _loop() -> None:
    waiting.enter()  # (for good: the run thread stays a batch thread)
    one_team.compute_on_one_thread()  # (no second OpenMP team: one_team.py)
    while True:
        with _lock:
            while _running[0] or not _queue:
                if _exiting[0] and not _queue and not _running[0]:
                    return
                _ready.wait()
            job = _queue.popleft()
            _running[0] = True
        job.run()


def _at_exit() -> None:
    """Let the worker finish the launched jobs, then end (as the thread pool
    it replaces did): a graph is never cut off mid-run at exit."""
    with _lock:
        _exiting[0] = True
        _ready.notify_all()


def submit(fn, *args, inline: bool = False) -> concurrent.futures.Future:
    """Queue ``fn(*args)`` for the worker; with ``inline``, run it here and
    now if nothing is queued or running (its error still waits in the future)."""
    global _thread, _last
    job = Job(fn, args)
    with _lock:
        here = inline and not _running[0] and not _queue
        if here:
            _running[0] = True
        else:
            if _thread is None:
                _thread = threading.Thread(target=_loop, name="lazy-mlir")
                threading._register_atexit(_at_exit)  # before non-daemon threads are joined
                _thread.start()
            _queue.append(job)
            _ready.notify_all()
        _last = job
        _unreported.append(job)
    if here:
        job.run()
    # Outside the lock: a job that is already done runs the callback here.
    job.add_done_callback(_forget_if_ok)
    return job


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
        while not last.done():
            with _lock:
                job = _queue[0] if _queue and not _running[0] else None
            if job is not None and _take(job):
                job.run()
            else:
                one_team.serve_until(lambda: last.done() or (bool(_queue) and not _running[0]), 0.05)
    raise_pending_error()


def raise_pending_error() -> None:
    with _lock:
        failed = [f for f in _unreported if f.done() and f.exception() is not None]
        for f in failed:
            _unreported.remove(f)
    if failed:
        failed[0].result()  # re-raises the worker's exception with its traceback
