"""The compiled-graph cache, scalar lifting, eager fallback and error paths.

Graphs that must be new to the cache use shapes no other test uses, so that
counting compiles does not depend on which tests ran before; and size
families are off here: a family two earlier tests of the same worker made
(``x.mul_(lr)`` at two other shapes) serves a new shape from its dynamic
module, with no compile to count (the file then failed by test order).
"""
from __future__ import annotations

import copy

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.ops import support
from e2e_helpers import LAZY, Counters, assert_lazy_close, lazy


def _rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=dtype)


@pytest.fixture(autouse=True)
def _one_module_per_size(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_DYNAMIC", "0")


# ---------------------------------------------------------------------- cache
def _step(x, w):
    return (x @ w).tanh().sum(0) * 0.5


def test_second_identical_step_is_cached():
    x1, w1 = _rand(3, 11, seed=1), _rand(11, 2, seed=2)
    out1 = _step(lazy(x1), lazy(w1))
    c = Counters()
    lm.mark_step()  # warm-up: compiles
    assert c.delta("UncachedCompile") == 1
    assert c.delta("MarkStep") == 1
    assert_lazy_close(out1, _step(x1, w1), rtol=1e-5, atol=1e-5)

    x2, w2 = _rand(3, 11, seed=3), _rand(11, 2, seed=4)  # other values, same shapes
    out2 = _step(lazy(x2), lazy(w2))
    c.snapshot()
    lm.mark_step()
    assert c.delta("UncachedCompile") == 0
    assert c.delta("CachedCompile") == 1
    # Reading results of a step that already ran compiles and runs nothing.
    c.snapshot()
    assert_lazy_close(out2, _step(x2, w2), rtol=1e-5, atol=1e-5)
    assert c.delta("UncachedCompile") == 0
    assert c.delta("CachedCompile") == 0


def test_changed_graph_is_not_taken_from_cache():
    x = _rand(3, 11, seed=5)
    w = _rand(11, 2, seed=6)
    out = (lazy(x) @ lazy(w)).sigmoid().sum(0) * 0.5  # sigmoid instead of tanh
    c = Counters()
    lm.mark_step()
    assert c.delta("UncachedCompile") == 1
    assert_lazy_close(out, (x @ w).sigmoid().sum(0) * 0.5, rtol=1e-5, atol=1e-5)


def test_sync_then_same_sync_is_cached():
    x = _rand(2, 13, seed=7)
    c = Counters()
    first = (lazy(x).exp() - 1).sum().item()
    second = (lazy(x * 2).exp() - 1).sum().item()
    assert c.delta("UncachedCompile") == 1
    assert c.delta("CachedCompile") == 1
    assert first == pytest.approx((x.exp() - 1).sum().item(), rel=1e-5)
    assert second == pytest.approx(((x * 2).exp() - 1).sum().item(), rel=1e-5)


def test_training_steps_hit_the_cache():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))
    lmodel = copy.deepcopy(model).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lopt = torch.optim.SGD(lmodel.parameters(), lr=0.1, momentum=0.9)
    xs = [_rand(4, 6, seed=10 + i) for i in range(4)]
    ys = [_rand(4, 1, seed=20 + i) for i in range(4)]
    c = Counters()
    for i, (x, y) in enumerate(zip(xs, ys)):
        if i == 2:  # steps 0 and 1 warm up (momentum buffers appear at step 1)
            c.snapshot()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        lopt.zero_grad()
        torch.nn.functional.mse_loss(lmodel(lazy(x)), lazy(y)).backward()
        lopt.step()
        lm.mark_step()
    assert c.delta("UncachedCompile") == 0
    assert c.delta("CachedCompile") >= 2
    for p, lp in zip(model.parameters(), lmodel.parameters()):
        assert_lazy_close(lp.detach(), p.detach(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ scalar changes
def test_changing_lr_in_mul_compiles_once():
    x0 = _rand(3, 7, seed=30)
    lx = lazy(x0)
    expected = x0.clone()
    c = Counters()
    for lr in (0.1, 0.2, 0.3, 0.4):
        lx.mul_(lr)
        expected.mul_(lr)
        lm.mark_step()
    assert c.delta("UncachedCompile") == 1
    assert c.delta("CachedCompile") == 3
    assert_lazy_close(lx, expected)


def test_changing_lr_in_add_alpha_compiles_once():
    p0, g0 = _rand(5, 3, seed=31), _rand(5, 3, seed=32)
    p, g = lazy(p0), lazy(g0)
    expected = p0.clone()
    c = Counters()
    for lr in (0.01, 0.02, 0.05, 0.003):
        p.add_(g, alpha=-lr)
        expected.add_(g0, alpha=-lr)
        lm.mark_step()
    assert c.delta("UncachedCompile") == 1
    assert c.delta("CachedCompile") == 3
    assert_lazy_close(p, expected)


def test_changing_lr_in_sgd_optimizer_compiles_once_per_graph():
    torch.manual_seed(1)
    model = torch.nn.Linear(3, 9)
    lmodel = copy.deepcopy(model).to("lazy")
    grads = [torch.randn_like(p) for p in model.parameters()]
    for p, lp, g in zip(model.parameters(), lmodel.parameters(), grads):
        p.grad, lp.grad = g.clone(), lazy(g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    lopt = torch.optim.SGD(lmodel.parameters(), lr=0.1)
    c = Counters()
    for lr in (0.1, 0.2, 0.3, 0.4):
        for group in (*opt.param_groups, *lopt.param_groups):
            group["lr"] = lr
        opt.step()
        lopt.step()
        lm.mark_step()
    assert c.delta("UncachedCompile") == 1
    for p, lp in zip(model.parameters(), lmodel.parameters()):
        assert_lazy_close(lp.detach(), p.detach())


# ------------------------------------------------------------------ fallback
@pytest.fixture
def deny_erf():
    had = "erf" in support.DENIED
    support.deny("erf", "test: force the eager fallback")
    try:
        yield
    finally:
        if not had:
            support.DENIED.pop("erf", None)


def test_denied_op_falls_back(deny_erf):
    x = _rand(3, 4, seed=40)
    c = Counters()
    lx = lazy(x)
    y = (lx * 0.5).erf() + 1  # compiled, fallback, compiled
    z = y.sum(1)
    assert y.device == LAZY
    assert c.delta("aten::erf") > 0
    assert c.delta("lazy::erf") == 0
    assert c.delta("lazy::mul") > 0
    assert_lazy_close(y, (x * 0.5).erf() + 1)
    assert_lazy_close(z, ((x * 0.5).erf() + 1).sum(1))


def test_denied_inplace_op_falls_back(deny_erf):
    x = _rand(2, 5, seed=41)
    lx = lazy(x)
    view = lx[1]
    c = Counters()
    view.erf_()
    expected = x.clone()
    expected[1].erf_()
    assert c.delta("aten::erf") + c.delta("aten::erf_") > 0
    assert_lazy_close(lx, expected)
    assert_lazy_close(view, expected[1])


def test_undenied_op_is_compiled_again():
    assert "erf" not in support.DENIED
    x = _rand(3, 4, seed=42)
    c = Counters()
    assert_lazy_close(lazy(x).erf(), x.erf())
    assert c.delta("lazy::erf") == 1
    assert c.delta("aten::erf") == 0


def test_complex_compiles_or_falls_back_without_crashing():
    a, b = _rand(2, 3, seed=43), _rand(2, 3, seed=44)
    c = Counters()
    la, lb = lazy(a), lazy(b)
    z = torch.complex(la, lb)
    assert z.dtype == torch.complex64 and z.device == LAZY
    w = z * z + 1
    mag = w.abs()
    ez = torch.complex(a, b)
    assert_lazy_close(w, ez * ez + 1)
    assert_lazy_close(mag, (ez * ez + 1).abs())
    assert_lazy_close(torch.view_as_real(w), torch.view_as_real(ez * ez + 1))
    assert_lazy_close(lazy(ez).conj_physical(), ez.conj_physical())
    # complex64 arithmetic is compiled in real pairs (passes/complex_as_real);
    # complex128 is not, and falls back
    assert c.fell_back() == []
    assert_lazy_close(z.cdouble() * w.cdouble(), ez.cdouble() * (ez * ez + 1).cdouble())
    assert c.fell_back() != []
    # The device is still fine for real-valued work afterwards.
    assert_lazy_close(la + lb, a + b)


def test_complex_from_host():
    z = torch.complex(_rand(4, seed=45), _rand(4, seed=46))
    lz = lazy(z)
    assert_lazy_close(lz * 2, z * 2)
    assert_lazy_close(lz.real, z.real)


def test_bfloat16_falls_back_without_crashing():
    x = _rand(2, 3, seed=47)
    xb = x.bfloat16()
    assert_lazy_close(lazy(xb) * 2, xb * 2)


def test_bfloat16_made_on_device():
    x = _rand(2, 3, seed=48)
    lb = lazy(x).bfloat16()
    assert lb.dtype == torch.bfloat16
    assert_lazy_close(lb, x.bfloat16())
    assert_lazy_close(lazy(x).bfloat16().float(), x.bfloat16().float())


# ------------------------------------------------------------ cross device
def test_cross_device_raises():
    lx = lazy(_rand(2, 3, seed=50))
    cpu = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="device"):
        lx + cpu
    with pytest.raises(RuntimeError, match="device"):
        cpu * lx
    with pytest.raises(RuntimeError, match="device"):
        torch.mm(lx, torch.ones(3, 2))
    with pytest.raises(RuntimeError, match="device"):
        lx.add_(cpu)
    with pytest.raises(RuntimeError, match="device"):
        torch.cat([lx, cpu])


def test_zero_dim_cpu_tensor_is_allowed():
    x = _rand(2, 3, seed=51)
    lx = lazy(x)
    s = torch.tensor(2.5)
    assert_lazy_close(lx + s, x + s)
    assert_lazy_close(s * lx, s * x)
    assert_lazy_close(torch.where(lx > 0, lx, torch.tensor(0.0)), torch.where(x > 0, x, torch.tensor(0.0)))
    i = torch.tensor([1, 2, 3])
    assert_lazy_close(lazy(i) * torch.tensor(2), i * torch.tensor(2))
    lx.mul_(torch.tensor(3.0))
    assert_lazy_close(lx, x * 3)


# ------------------------------------------------- exceptions in user code
def test_user_exception_mid_trace_leaves_device_usable():
    x = _rand(3, 4, seed=60)
    lx = lazy(x)
    kept = lx * 3

    def user_step(t):
        a = t.exp()
        b = a @ t.t()
        t.add_(1)  # a write before the error, as in eager
        raise ValueError("user code failed")
        return b  # noqa

    with pytest.raises(ValueError, match="user code failed"):
        user_step(lx)
    out = lx.tanh() + kept
    lm.mark_step()
    assert_lazy_close(lx, x + 1)
    assert_lazy_close(out, (x + 1).tanh() + x * 3)
    assert_lazy_close(kept, x * 3)


def test_op_error_mid_trace_leaves_device_usable():
    x = _rand(3, 4, seed=61)
    lx = lazy(x)
    partial = lx.sin()
    with pytest.raises(RuntimeError):
        lx @ lazy(_rand(5, 2, seed=62))  # shapes do not match
    with pytest.raises(RuntimeError):
        lx.view(5, -1)
    with pytest.raises(IndexError):
        lx[7]
    out = partial * 2
    lm.mark_step()
    assert_lazy_close(out, x.sin() * 2)
    assert_lazy_close(lx + 1, x + 1)


def test_exception_inside_no_grad_and_autograd():
    torch.manual_seed(2)
    model = torch.nn.Linear(4, 2)
    lmodel = copy.deepcopy(model).to("lazy")
    x = _rand(3, 4, seed=63)
    with pytest.raises(ZeroDivisionError):
        with torch.no_grad():
            lmodel(lazy(x))
            1 / 0
    loss = lmodel(lazy(x)).sum()
    loss.backward()
    model(x).sum().backward()
    lm.mark_step()
    for p, lp in zip(model.parameters(), lmodel.parameters()):
        assert_lazy_close(lp.grad, p.grad, rtol=1e-5, atol=1e-5)


def _forty_term_sum(counters, size):
    ts = [torch.randn(size) for _ in range(40)]
    total = lazy(ts[0])
    for t in ts[1:]:
        total = total + lazy(t) * 1.5
    counters.snapshot()
    expected = ts[0]
    for t in ts[1:]:
        expected = expected + t * 1.5
    assert_lazy_close(total, expected)


def test_graph_with_a_dispatch_over_32_buffers_runs_eagerly(counters, monkeypatch):
    """IREE's runtime refuses a dispatch binding more than 32 buffers; such a
    graph compiles but cannot load, and must run eagerly, not raise. (Made
    here without the long-sum rewrite, ``passes/wide_sums``, which keeps
    IREE from fusing 40 terms.)"""
    from lazy_mlir.pipeline import stages
    monkeypatch.setattr(stages, "WIDE_SUM_TARGETS", frozenset())
    _forty_term_sum(counters, 8)  # (its failure denies these signatures: a size of its own)
    assert counters.delta("aten::add") >= 1 and counters.delta("UncachedCompile") == 1


def test_a_sum_of_forty_inputs_compiles(counters):
    """With the long-sum rewrite the same graph compiles and runs."""
    _forty_term_sum(counters, 9)
    assert not counters.fell_back() and counters.delta("UncachedCompile") == 1


def test_failed_compile_stops_only_that_argument_signature(counters):
    """A bool tensor clamped by integer bounds (an int64 result) fails to
    compile (a real compile failure): that graph runs eagerly and the bool
    signature of ``clamp.Tensor`` stops compiling, while float ``clamp`` keeps compiling (a
    process-wide denial made every later float ``clamp``, and a failed int64
    convolution every later float one, eager)."""
    bools = torch.tensor([[True, False, True], [False, False, True]])
    floats = torch.tensor([[1.5, -2.0, 0.25], [4.0, 0.0, -1.0]])

    out = lazy(bools).clamp(2, 5)
    assert_lazy_close(out, bools.clamp(2, 5))
    assert counters.delta("aten::clamp") == 1
    assert "clamp.Tensor" not in support.DENIED
    assert support.DENIED_SIGNATURES["clamp.Tensor"]

    counters.snapshot()
    fout = lazy(floats).clamp(lazy(floats - 1), lazy(floats.abs()))
    assert_lazy_close(fout, floats.clamp(floats - 1, floats.abs()))
    assert counters.delta("aten::clamp") == 0
    assert counters.delta("lazy::clamp") == 1

    counters.snapshot()  # the denied signature now falls back at capture
    out = lazy(~bools).clamp(0, 1)
    assert_lazy_close(out, (~bools).clamp(0, 1))
    assert counters.delta("aten::clamp") == 1
    assert counters.delta("UncachedCompile") <= 1  # the not only: no failing compile again
