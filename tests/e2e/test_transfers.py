"""Host <-> device traffic: what crosses, and what is not copied on the cpu target.

``TransferToDevice`` / ``TransferFromDevice`` count bytes crossing between
host and device (copied or not); ``ZeroCopyToDevice`` / ``ZeroCopyFromDevice``
count the part that was shared instead of copied.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.graph.ir import TensorSpec
from lazy_mlir.targets import get_target
from lazy_mlir.runtime.session import Session, session_for

NAMES = ("TransferToDevice", "TransferFromDevice", "ZeroCopyToDevice", "ZeroCopyFromDevice")


@pytest.fixture
def cpu():
    return session_for(get_target("cpu"))


def test_a_steady_training_step_moves_the_batch_in_and_the_loss_out(counters):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(),
                                torch.nn.Linear(8, 3)).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(4, 12), torch.tensor([0, 1, 2, 1])

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to("lazy")), y.to("lazy"))
        loss.backward()
        opt.step()
        lm.mark_step()
        return loss.item()

    for _ in range(3):  # the first steps upload the weights and compile
        step()
    lm.wait_device_ops()
    counters.snapshot()
    step()
    lm.wait_device_ops()
    assert counters.delta("UncachedCompile") == 0
    batch = x.nbytes + y.nbytes
    sent = counters.delta("TransferToDevice")
    # The batch, and at most a few lifted scalars (those seen before are reused).
    assert batch <= sent <= batch + 32, (sent, batch)
    assert counters.delta("TransferFromDevice") == 4  # loss.item(): one float32
    # Nothing was copied: the batch was imported, the loss read in place.
    assert counters.delta("ZeroCopyToDevice") == sent
    assert counters.delta("ZeroCopyFromDevice") == 4


def test_round_trip_shares_the_host_memory(cpu):
    t = torch.randn(16, 16)
    assert t.data_ptr() % 64 == 0
    arr = cpu.to_device(t)
    back = cpu.to_host(arr, TensorSpec.of(t))
    assert back.data_ptr() == t.data_ptr()
    assert torch.equal(back, t)


def test_computed_results_are_read_in_place(counters):
    a = torch.randn(32, 8)
    r = a.to("lazy") * 3 + 1
    lm.mark_step()
    lm.wait_device_ops()
    data = value_of(r).data
    session = session_for(get_target("cpu"))
    counters.snapshot()
    first = session.to_host(data.device, data.spec)
    second = session.to_host(data.device, data.spec)
    assert first.data_ptr() == second.data_ptr()  # both views of the device buffer
    assert counters.delta("ZeroCopyFromDevice") == 2 * a.nbytes
    assert counters.delta("TransferFromDevice") == 2 * a.nbytes
    torch.testing.assert_close(first, a * 3 + 1)
    user = r.cpu()  # what users get is their own copy
    assert user.data_ptr() != first.data_ptr()
    torch.testing.assert_close(user, a * 3 + 1)


def test_unaligned_host_data_is_copied(cpu, counters):
    t = torch.arange(17, dtype=torch.float32)[1:]  # starts 4 bytes into its storage
    assert t.data_ptr() % 64 != 0
    counters.snapshot()
    arr = cpu.to_device(t)
    assert counters.delta("TransferToDevice") == t.nbytes
    assert counters.delta("ZeroCopyToDevice") == 0
    back = cpu.to_host(arr, TensorSpec.of(t))
    assert back.data_ptr() != t.data_ptr()
    assert torch.equal(back, t)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.bool, torch.int64, torch.float64,
                                   torch.float16, torch.uint8])
def test_dtypes_round_trip(cpu, dtype):
    t = (torch.randn(3, 5) * 10).to(dtype)
    back = cpu.to_host(cpu.to_device(t), TensorSpec.of(t))
    assert back.dtype == dtype and torch.equal(back, t)


def test_zero_copy_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_ZERO_COPY", "0")
    s = Session(get_target("cpu"))
    t = torch.randn(8, 8)
    before = lm.metrics.counter_value("ZeroCopyToDevice")
    back = s.to_host(s.to_device(t), TensorSpec.of(t))
    assert lm.metrics.counter_value("ZeroCopyToDevice") == before
    assert back.data_ptr() != t.data_ptr() and torch.equal(back, t)


def test_results_survive_their_device_arrays(cpu):
    """A host view of a result keeps the buffer alive after the array is gone."""
    a = torch.randn(64, 64)
    r = a.to("lazy") + 2
    lm.mark_step()
    lm.wait_device_ops()
    data = value_of(r).data
    host = cpu.to_host(data.device, data.spec)
    del r, data
    import gc
    gc.collect()
    junk = [(torch.randn(64, 64).to("lazy") * 5) for _ in range(4)]
    lm.mark_step()
    lm.wait_device_ops()
    torch.testing.assert_close(host, a + 2)
    del junk


def test_results_written_into_an_argument_leave_host_data_alone(counters):
    """IREE may compute ``x[2:] = src`` in the buffer of ``x`` and return it.
    With ``x`` imported from host memory, that would write into the host copy
    of ``x`` and tie the result to memory that dies with ``x``: neither happens."""
    import gc
    x = torch.arange(12.0).reshape(4, 3)
    src = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])
    expected = x.clone()
    expected[2:] = src
    for _ in range(3):  # the first call learns which arguments come back as results
        a = x.clone().to("lazy")
        old = value_of(a).data
        counters.snapshot()
        a[2:].copy_(src)
        lm.mark_step()
        lm.wait_device_ops()
        assert counters.delta("ZeroCopyToDevice") > 0
        assert torch.equal(old.host, x)       # the imported host data is unchanged
        del old
        gc.collect()
        junk = [torch.randn(4, 3) for _ in range(64)]  # reuse any freed memory
        torch.testing.assert_close(a.cpu(), expected)
        del junk


SCRIPT = textwrap.dedent("""
    import os, torch, lazy_mlir as lm
    def threads():
        return len(os.listdir("/proc/self/task"))
    before = threads()
    from lazy_mlir.runtime.session import session_for
    from lazy_mlir.targets import get_target
    session_for(get_target("cpu"))
    print(threads() - before)
""")


def _threads_started(n: int) -> int:
    env = dict(os.environ, LAZY_MLIR_CPU_THREADS=str(n))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_cpu_worker_threads():
    """LAZY_MLIR_CPU_THREADS sets the local-task driver's worker count (the
    device starts one more thread of its own, whatever the count)."""
    assert _threads_started(4) - _threads_started(1) == 3
