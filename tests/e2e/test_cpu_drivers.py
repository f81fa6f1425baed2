"""The cpu target on IREE's ``local-sync`` driver (``LAZY_MLIR_CPU_DRIVER``):
a tiny GPT-2 trains like eager with its attention as host calls into
PyTorch, on a session of that driver."""
from __future__ import annotations

import pytest

import lazy_mlir as lm
from lazy_mlir.lazy.sync import current_target, set_target
from lazy_mlir.ops import attention_host
from lazy_mlir.tools.real_models import real_model
from e2e_helpers import assert_trains_like_eager


@pytest.fixture
def local_sync(monkeypatch):
    """The cpu target on local-sync for one test, local-task again after it."""
    monkeypatch.setattr(attention_host, "MIN_MACS", 0)  # the tiny model's attention is called
    monkeypatch.setenv("LAZY_MLIR_HOST_ATTENTION", "1")  # (whatever this machine's default)
    monkeypatch.setenv("LAZY_MLIR_CPU_DRIVER", "local-sync")
    set_target("cpu")
    yield
    monkeypatch.delenv("LAZY_MLIR_CPU_DRIVER")
    set_target("cpu")


def test_tiny_gpt2_trains_like_eager_on_local_sync(local_sync):
    from lazy_mlir.runtime.session import session_for
    assert current_target().driver == "local-sync"
    c = assert_trains_like_eager(real_model("gpt2", "tiny", layers=1))
    assert c.delta("HostAttentionCall") == 6  # forward and backward, three steps
    assert session_for(current_target()).host_memory
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and c.delta(n)]


def test_modules_with_host_calls_run_on_local_sync(monkeypatch):
    """On the default ``local-task`` driver, a module that calls PyTorch's
    kernels runs on the session's ``local-sync`` device
    (``Session._config_for_calls``); its results are arrays of the session's
    own device, which the next step takes without a copy."""
    from lazy_mlir.runtime.session import session_for
    monkeypatch.setattr(attention_host, "MIN_MACS", 0)
    monkeypatch.setenv("LAZY_MLIR_HOST_ATTENTION", "1")
    monkeypatch.delenv("LAZY_MLIR_CPU_DRIVER", raising=False)
    set_target("cpu")
    session = session_for(current_target())
    assert session.target.driver == "local-task"
    copied = []  # arrays ``adopt`` copied through the host
    adopt = session.adopt

    def adopt_spy(a):
        b = adopt(a)
        if b is not a:
            copied.append(a)
        return b
    monkeypatch.setattr(session, "adopt", adopt_spy)
    c = assert_trains_like_eager(real_model("gpt2", "tiny", layers=1))
    assert c.delta("HostAttentionCall") == 6
    assert session.calls_device is not None and session.calls_device is not session.device
    # (arrays of another target's device are copied; the calls device's never)
    assert not [a for a in copied if a._device is session.calls_device]
