"""The cpu target on IREE's ``local-sync`` driver (``LAZY_MLIR_CPU_DRIVER``):
a tiny GPT-2 trains like eager with its attention as host calls into
PyTorch, on a session of that driver."""
from __future__ import annotations

import pytest

import lazy_mlir as lm
from lazy_mlir.lazy.sync import current_target, set_target
from lazy_mlir.host_calls.ops import attention as attention_host
from lazy_mlir.models.real import real_model
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


@pytest.mark.slow  # (39 s in CI; the two tests below check which modules take local-sync)
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


def test_convolution_modules_without_host_calls_run_on_local_task(monkeypatch):
    """``conv_channels_last``'s filter barrier is erased by IREE, so a conv
    net's modules wait on the host only for their results and stay on
    ``local-task`` (with a ``util.optimization_barrier`` they waited mid-run,
    and the medium ResNet's step module leaked 56 MB a call there)."""
    import torch
    from lazy_mlir.passes.conv_channels_last import MIN_CHANNELS
    from lazy_mlir.runtime.session import Session, session_for
    assert MIN_CHANNELS <= 8  # the net's convolution is rewritten
    for switch in ("LAZY_MLIR_BLAS", "LAZY_MLIR_HOST_ATTENTION"):
        monkeypatch.setenv(switch, "0")
    monkeypatch.delenv("LAZY_MLIR_CPU_DRIVER", raising=False)
    set_target("cpu")
    session = session_for(current_target())
    on_calls_device = []  # of each module loaded
    load = Session.load

    def load_spy(self, vmfb, *args):
        module = load(self, vmfb, *args)
        on_calls_device.append(module.batch_waits is False)
        return module
    monkeypatch.setattr(Session, "load", load_spy)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Flatten(), torch.nn.Linear(16 * 64, 4))
    x = torch.randn(2, 8, 8, 8)
    lazy = [p.grad for p in _one_step(net, x, "lazy")]
    eager = [p.grad for p in _one_step(net, x, "cpu")]
    for a, e in zip(lazy, eager):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-5)
    assert session.target.driver == "local-task"
    assert on_calls_device and not any(on_calls_device)


def _one_step(net, x, device):
    import copy
    net = copy.deepcopy(net).to(device)
    net(x.to(device)).square().mean().backward()
    if device == "lazy":
        lm.mark_step()
    return list(net.parameters())
