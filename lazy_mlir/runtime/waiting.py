"""Waiting for the cpu driver's workers without spinning against them.

IREE 3.13's blocking semaphore wait (``iree_async_semaphore_multi_wait``)
registers a timepoint whose callback, run by the IREE worker that signals,
posts the waiter's futex and only then marks itself completed; the woken
waiter, before it returns, spins with ``pause`` until that mark (it must not
free the timepoint under a running callback). Linux lets a woken thread
preempt the one that woke it on the same core, so on a busy machine the
waiter often runs right after the futex wake, with the worker preempted one
store short of ``completed``, and spins until the scheduler's slice ends
(milliseconds). ``perf`` on ResNet tiny's ``compile_train_step`` loop, load
~8 on 2 cores: 36% of the process's samples were that loop (``_runtime.so``
+0x246810), on lazy-mlir's run thread and the main thread; each step's run
paid it at least once (every ``invoke`` of a module waits so, as does a queue
copy).

``SCHED_BATCH`` is the policy Linux gives a thread that must not preempt on
wake-up (and only that: its nice value and its share of the CPU stay as they
were). So a thread that waits for IREE's workers runs under it for the wait
(``enter`` / ``leave``): the worker then finishes the callback before the
waiter runs; lazy-mlir's run thread is a batch thread for good (``run_queue``).
Both together, the same loop against main, alternated, load ~14: median step
3.5-8.1 against 11.9-18.9 ms, the Python threads' CPU 1.3-1.5 against
3.8-4.3 ms a step (the waits alone left 13% of the samples in the spin: the
worker can still be preempted by another process). Nothing here depends on
module size: ResNet medium's step (~190 ms) was unchanged (198 against 195
ms median, one round); a ``local-sync`` device instead (no worker to wait
for) cost as much wall time as main at tiny, and one IREE worker more.
Changing between ``SCHED_OTHER`` and ``SCHED_BATCH`` needs no
privilege; where it fails (not Linux, a seccomp filter) waits stay as they
were, and a thread running under another policy (real-time, idle) is left
alone.
"""
from __future__ import annotations

import logging
import os

log = logging.getLogger("lazy_mlir")

_BATCH = getattr(os, "SCHED_BATCH", None)
_OTHER = getattr(os, "SCHED_OTHER", None)
_usable = [_BATCH is not None and hasattr(os, "sched_setscheduler")]
_PARAM = os.sched_param(0) if _usable[0] else None


def enter() -> bool:
    """Put the calling thread under ``SCHED_BATCH`` for a wait; whether
    ``leave`` must put it back."""
    if not _usable[0]:
        return False
    try:
        if os.sched_getscheduler(0) != _OTHER:
            return False
        os.sched_setscheduler(0, _BATCH, _PARAM)
    except OSError as e:  # not permitted here: wait as before
        _usable[0] = False
        log.debug("lazy-mlir: cannot wait under SCHED_BATCH (%s)", e)
        return False
    return True


def call_batched(on: bool, fn, *args):
    """``fn(*args)`` (a blocking wait on IREE) with the calling thread under
    ``SCHED_BATCH`` if ``on``, and back under ``SCHED_OTHER`` after."""
    entered = on and enter()
    try:
        return fn(*args)
    finally:
        leave(entered)


def other_while(fn, *args):
    """``fn(*args)`` with the calling thread under ``SCHED_OTHER`` (threads it
    starts inherit the policy: IREE's workers must not be batch threads)."""
    entered = False
    if _usable[0]:
        try:
            entered = os.sched_getscheduler(0) == _BATCH
            if entered:
                os.sched_setscheduler(0, _OTHER, _PARAM)
        except OSError:
            entered = False
    try:
        return fn(*args)
    finally:
        if entered:
            try:
                os.sched_setscheduler(0, _BATCH, _PARAM)
            except OSError:
                pass


def leave(entered: bool) -> None:
    """Undo ``enter`` (the calling thread back under ``SCHED_OTHER``)."""
    if entered:
        try:
            os.sched_setscheduler(0, _OTHER, _PARAM)
        except OSError as e:
            log.debug("lazy-mlir: cannot leave SCHED_BATCH (%s)", e)
