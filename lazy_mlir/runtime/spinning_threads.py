"""Busy-waiting driver threads, found and given a low CPU priority.

IREE 3.13's Vulkan HAL gives each device queue a completion thread that
waits in ``vkWaitSemaphores`` for ANY of two timeline semaphores, with no
timeout. Mesa's common Vulkan runtime before 23.x (Debian 12's lavapipe is
22.3) emulates timeline semaphores without a multi-wait and answers such a
wait by polling in a loop ("there's nothing better we can do than spin",
``vk_sync.c``). So from device creation until the process exits, two
threads each burn a whole core while the device is idle: on a 2-core machine
that halves everything else the process and its neighbours do (iree-compile
subprocesses, other test workers). Measured: an idle device took 2.4 s of
CPU per 5 s at load 10, and the suite model runs spent more CPU in those
threads than in iree-compile.

Neither IREE nor the driver can be told otherwise, so ``calm(before)``
finds the threads that a device creation started and that are running in
user space at every one of a few samples (a waiting thread sits in a system
call: ``/proc/self/task/<tid>/syscall`` names it), and sets them to nice 10.
They still spin on idle cores; on a busy one a normal thread gets about ten
times their share. Not 19: those threads also submit the queue's deferred
work, and at nice 19 a module's first runs took 2-5x longer under load
(transformer, 6 steps on lavapipe: 17-21 s against 10-11 s at nice 0 and
5-7 s at nice 10). At nice 10 the step-1 iree-compile of the same run lost
5 s of CPU to them instead of 41-59 s. Linux only; a no-op elsewhere.
"""
from __future__ import annotations

import logging
import os
import time

log = logging.getLogger("lazy_mlir")

NICE = 10
SAMPLES = 6
SAMPLE_GAP_S = 0.02
# Every thread ``calm`` has lowered (tests read it: an export artifact's loader
# creates its own IREE device, outside lazy-mlir's sessions, and leaves its
# threads as they are).
calmed_ids: set[int] = set()


def thread_ids() -> set[int]:
    """This process's thread ids (empty where /proc is missing)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _in_user_space(tid: int) -> bool:
    """Whether thread ``tid`` is running (or runnable) outside any system call."""
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            return f.read().startswith("running")
    except OSError:
        return False


def spinning(candidates: set[int]) -> list[int]:
    """The ``candidates`` found running in user space at every sample."""
    busy = set(candidates)
    for i in range(SAMPLES):
        if i:
            time.sleep(SAMPLE_GAP_S)
        busy = {t for t in busy if _in_user_space(t)}
        if not busy:
            break
    return sorted(busy)


def calm(before: set[int]) -> list[int]:
    """Set the threads started since ``before`` (``thread_ids()``) that spin
    to nice ``NICE``; returns their ids."""
    if not before or not hasattr(os, "setpriority"):
        return []
    calmed = []
    for tid in spinning(thread_ids() - before):
        try:
            os.setpriority(os.PRIO_PROCESS, tid, NICE)
            calmed.append(tid)
            calmed_ids.add(tid)
        except OSError as e:  # (gone, or not permitted): leave it
            log.debug("lazy-mlir: cannot lower the priority of thread %d: %s", tid, e)
    if calmed:
        log.debug("lazy-mlir: %d busy-waiting driver threads set to nice %d", len(calmed), NICE)
    return calmed


def nice_of(tid: int) -> int:
    """Thread ``tid``'s nice value (``/proc``'s stat field 19)."""
    with open(f"/proc/self/task/{tid}/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[16])
