"""The vulkan target computes what the cpu target computes.

Skipped, with the reason, when the IREE runtime has no ``vulkan`` driver or
the driver finds no device. With Debian's ``mesa-vulkan-drivers`` installed
(CI's ``.ci/run`` installs it) the device is llvmpipe (lavapipe), a Vulkan
implementation running on the CPU: slow, so batches stay small.
"""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm


def _settle():
    lm.mark_step()
    lm.wait_device_ops()


@pytest.fixture
def targets(vulkan_session):
    """``run(fn, *host_tensors)`` -> (cpu result, vulkan result) as host
    tensors, ``fn`` applied to fresh lazy copies on each target."""
    _settle()

    def run(fn, *inputs):
        out = []
        for name in ("cpu", "vulkan"):
            lm.set_target(name)
            try:
                res = fn(*[t.to("lazy") for t in inputs])
                out.append(tuple(r.cpu() for r in res) if isinstance(res, tuple)
                           else res.cpu())
            finally:
                _settle()
        return out

    try:
        yield run
    finally:
        lm.set_target("cpu")


def test_target_and_device(vulkan_session):
    t = vulkan_session.target
    assert (t.name, t.backend, t.driver) == ("vulkan", "vulkan-spirv", "vulkan")
    assert any(f.startswith("--iree-vulkan-target=") for f in t.flags)
    assert not vulkan_session.host_memory  # results are read back by a device copy


def test_elementwise(targets):
    torch.manual_seed(0)
    a, b = torch.randn(5, 7), torch.randn(5, 7)   # 35 elements: not whole 32-bit words of bytes

    def f(a, b):
        return (a * b + 2).exp().tanh() - torch.where(a > b, a, b).sigmoid(), a > 0.1
    (cv, cm), (vv, vm) = targets(f, a, b)
    torch.testing.assert_close(vv, cv, atol=1e-5, rtol=1e-5)
    assert vm.dtype == torch.bool and torch.equal(vm, cm)


def test_integer_and_narrow_dtypes(targets):
    i = torch.tensor([3, -1, 2, 1 << 40, 7])
    h = torch.randn(3, 5).to(torch.bfloat16)
    d = torch.randn(7, dtype=torch.float64)
    (ci, ch, cd), (vi, vh, vd) = targets(lambda i, h, d: (i * 3 + 1, h * 2.5, d.sin() * 1e-3),
                                          i, h, d)
    assert torch.equal(vi, ci) and vi.dtype == torch.int64
    assert torch.equal(vh, ch) and vh.dtype == torch.bfloat16
    assert vd.dtype == torch.float64
    torch.testing.assert_close(vd, cd)


def test_matmul_and_reductions(targets):
    torch.manual_seed(1)
    a, b = torch.randn(33, 70), torch.randn(70, 9)

    def f(a, b):
        m = a @ b
        return m, m.softmax(-1), a.sum(1), a.amax(0), a.argmax(1)
    cpu, vk = targets(f, a, b)
    for c, v in zip(cpu, vk):
        assert v.dtype == c.dtype and v.shape == c.shape
        torch.testing.assert_close(v, c, atol=1e-4, rtol=1e-5)


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_mnist_cnn_training_matches_cpu(vulkan_session):
    """The LTC tutorial's CNN, a few SGD steps: the losses on Vulkan are the
    cpu target's within 1e-4, and so are the trained weights."""
    torch.manual_seed(0)
    from lazy_mlir.models.seed import MnistCNN
    base = MnistCNN(dropout=False)
    x = torch.randn(4, 1, 28, 28)
    y = torch.randint(0, 10, (4,))

    def train(target, steps=3):
        _settle()
        lm.set_target(target)
        try:
            model = copy.deepcopy(base).to("lazy")
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            losses = []
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                loss = F.nll_loss(model(x.to("lazy")), y.to("lazy"))
                loss.backward()
                opt.step()
                lm.mark_step()
                losses.append(loss.item())
            return losses, {k: v.cpu() for k, v in model.state_dict().items()}
        finally:
            _settle()
            lm.set_target("cpu")

    cpu_losses, cpu_state = train("cpu")
    vk_losses, vk_state = train("vulkan")
    assert cpu_losses[-1] < cpu_losses[0]  # it trains
    for c, v in zip(cpu_losses, vk_losses):
        assert abs(c - v) < 1e-4, (cpu_losses, vk_losses)
    for k in cpu_state:
        torch.testing.assert_close(vk_state[k], cpu_state[k], atol=1e-4, rtol=1e-4)


def test_readback_copies_and_counts(targets, vulkan_session):
    before = {n: lm.metrics.counter_value(n)
              for n in ("TransferFromDevice", "ZeroCopyFromDevice", "TransferToDevice")}
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    lm.set_target("vulkan")
    out = (a.to("lazy") * 2.71875).cpu()   # a scalar no other test lifted (and cached)
    _settle()
    torch.testing.assert_close(out, a * 2.71875)
    d = {n: lm.metrics.counter_value(n) - v for n, v in before.items()}
    assert d["TransferToDevice"] == a.nbytes + 4   # the tensor and the lifted scalar
    assert d["TransferFromDevice"] == out.nbytes
    assert d["ZeroCopyFromDevice"] == 0           # a device copy, not a mapping


def test_data_moves_between_targets(vulkan_session):
    """Device data computed under one target feeds graphs of, and is read
    under, the other (after ``set_target``)."""
    _settle()
    a = torch.randn(6, 5)
    try:
        lm.set_target("cpu")
        t = a.to("lazy") + 1
        _settle()
        lm.set_target("vulkan")
        u = t * 3           # cpu data into a Vulkan graph
        _settle()
        lm.set_target("cpu")
        v = u - 2           # Vulkan data into a cpu graph
        u_host = u.cpu()    # Vulkan data read under the cpu target
        v_host = v.cpu()
    finally:
        _settle()
        lm.set_target("cpu")
    torch.testing.assert_close(u_host, (a + 1) * 3)
    torch.testing.assert_close(v_host, (a + 1) * 3 - 2)
