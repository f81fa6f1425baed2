"""A thread waiting for the cpu driver's workers does so under SCHED_BATCH
(runtime/waiting.py), and only while it waits: the caller's policy before
and after, and IREE's own worker threads, are SCHED_OTHER."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.lazy.sync import current_target
from lazy_mlir.runtime import waiting
from lazy_mlir.compile_service.lookup import wait_for_compiles
from lazy_mlir.runtime.session import LoadedModule

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux")
                                or not hasattr(os, "SCHED_BATCH"), reason="Linux policies")


def _policies_of(prefix: str) -> dict[int, int]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{t}/comm") as f:
            if f.read().startswith(prefix):
                out[int(t)] = os.sched_getscheduler(int(t))
    return out


def test_a_run_waits_under_sched_batch_and_restores_the_policy(monkeypatch):
    if current_target().driver != "local-task":
        pytest.skip("measured and applied on the cpu target's local-task driver")
    seen = []
    real_call = LoadedModule.__call__

    def call(self, *args):
        fn = self.call
        if not getattr(fn, "_spy", False):
            def spy(run):
                seen.append(os.sched_getscheduler(0))
                return fn(run)
            spy._spy = True
            self.call = spy
        return real_call(self, *args)

    monkeypatch.setattr(LoadedModule, "__call__", call)
    x = torch.randn(5, 7)
    before = os.sched_getscheduler(0)
    for _ in range(3):  # (the first run may be eager while its module compiles)
        out = (x.to("lazy").exp() * 3 - 1).cpu()
        lm.wait_device_ops()
        wait_for_compiles()
    assert torch.allclose(out, x.exp() * 3 - 1, atol=1e-5)
    assert seen and set(seen) == {os.SCHED_BATCH}
    assert os.sched_getscheduler(0) == before == os.SCHED_OTHER
    workers = _policies_of("iree-worker")
    assert workers and set(workers.values()) == {os.SCHED_OTHER}


def test_a_thread_under_another_policy_is_left_alone():
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    try:
        entered = waiting.enter()
        assert not entered and os.sched_getscheduler(0) == os.SCHED_BATCH
        waiting.leave(entered)
        assert os.sched_getscheduler(0) == os.SCHED_BATCH
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    assert waiting.enter()
    assert os.sched_getscheduler(0) == os.SCHED_BATCH
    waiting.leave(True)
    assert os.sched_getscheduler(0) == os.SCHED_OTHER


POLICIES = textwrap.dedent("""
    import json, os, threading, torch, lazy_mlir as lm
    from lazy_mlir.compile_service.lookup import wait_for_compiles
    x = torch.randn(6, 4)
    for _ in range(3):  # the device is made by the run thread, at the first run
        y = (x.to("lazy").sin() + 2).cpu()
        wait_for_compiles()
    run = [t.native_id for t in threading.enumerate() if t.name == "lazy-mlir"]
    iree = [int(t) for t in os.listdir("/proc/self/task")
            if open(f"/proc/self/task/{t}/comm").read().startswith("iree-")]
    print(json.dumps({"ok": torch.allclose(y, x.sin() + 2, atol=1e-6),
                      "main": os.sched_getscheduler(0),
                      "run": [os.sched_getscheduler(t) for t in run],
                      "iree": sorted({os.sched_getscheduler(t) for t in iree}),
                      "iree_threads": len(iree)}))
""")


def test_the_run_thread_is_a_batch_thread_and_iree_workers_are_not():
    """lazy-mlir's run thread runs under SCHED_BATCH for good; IREE's threads,
    started when that thread makes the device, are SCHED_OTHER."""
    out = subprocess.run([sys.executable, "-c", POLICIES], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, LAZY_MLIR_TARGET="cpu"))
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["iree_threads"] >= 1
    assert got["main"] == os.SCHED_OTHER
    assert got["run"] == [os.SCHED_BATCH]
    assert got["iree"] == [os.SCHED_OTHER]


FIRST_DEVICE_FROM_A_BATCH_THREAD = textwrap.dedent("""
    import json, os, threading, time, iree.runtime as rt
    from lazy_mlir.runtime import session
    from lazy_mlir.targets import get_target
    def make():
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        session._device_for(rt, get_target("cpu"))
    t = threading.Thread(target=make); t.start(); t.join()
    for _ in range(200):  # (a worker names itself once it runs: on a busy machine, later)
        iree = [int(t) for t in os.listdir("/proc/self/task")
                if open(f"/proc/self/task/{t}/comm").read().startswith("iree-")]
        if iree:
            break
        time.sleep(0.05)
    print(json.dumps(sorted({os.sched_getscheduler(t) for t in iree})))
""")


def test_a_device_first_made_by_a_batch_thread_gets_workers_that_are_not():
    """The local-task driver starts its workers when the driver is made (not
    the device), so that too happens under SCHED_OTHER (a CI run found a
    process's workers SCHED_BATCH: its driver was first made by the run thread)."""
    out = subprocess.run([sys.executable, "-c", FIRST_DEVICE_FROM_A_BATCH_THREAD],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [os.SCHED_OTHER]
