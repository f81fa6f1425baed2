"""The Vulkan device's busy-waiting driver threads run at nice 10
(``runtime.spinning_threads``): with IREE 3.13 on lavapipe (Mesa 22.3) each
queue's completion thread polls in user space for the life of the device, a
whole core each, which slowed everything else in the process and beside it."""
from __future__ import annotations

import sys
import threading

import pytest

from lazy_mlir.runtime import spinning_threads

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_spinning_driver_threads_are_calmed(vulkan_session):
    import lazy_mlir as lm
    lm.mark_step()
    lm.wait_device_ops()  # nothing of ours runs while the threads are sampled
    others = spinning_threads.thread_ids() - {threading.get_native_id()}
    spinning = set(spinning_threads.spinning(others))
    if not spinning:
        pytest.skip("this Vulkan driver does not busy-wait")
    # (an export artifact loaded in this process has a device of its own, whose
    # threads lazy-mlir does not touch: only the sessions' devices are checked)
    ours = spinning & spinning_threads.calmed_ids
    assert ours, f"no spinning thread of the session's device was calmed: {sorted(spinning)}"
    assert {t: spinning_threads.nice_of(t) for t in ours} == \
        {t: spinning_threads.NICE for t in ours}


def test_calm_leaves_waiting_threads_alone():
    """A thread blocked in a system call is not spinning, whatever its age."""
    before = spinning_threads.thread_ids()
    stop = threading.Event()
    waiter = threading.Thread(target=stop.wait)
    waiter.start()
    try:
        assert spinning_threads.calm(before) == []
        assert spinning_threads.nice_of(waiter.native_id) != spinning_threads.NICE
    finally:
        stop.set()
        waiter.join()
