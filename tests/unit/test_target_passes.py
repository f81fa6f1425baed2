"""The per-target passes for GPUs (no compiler needed): variance in float32
(``passes.variance_f32``), the int64-fits-int32 analysis
(``passes.int64_range``), the session's check of int64 data, and long sums
as one reduction (``passes.wide_sums``)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.passes import int64_range, variance_f32, wide_sums
from lazy_mlir.pipeline.fx_graph import decompose
from lazy_mlir.targets import F32_STATISTICS_TARGETS, WIDE_SUM_TARGETS, get_target, narrows_int64

aten = torch.ops.aten


def _fx(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def _bn(x):
    """What PyTorch's training batch norm decomposes into (lazy capture records it)."""
    var, mean = torch.var_mean(x, [0, 2, 3], correction=0, keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5), var * 1.0588


def test_batch_norm_statistics_stay_float32():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5) * 3 + 1
    base = decompose(_fx(_bn, x))
    assert any(n.target is aten.var_mean.correction for n in base.graph.nodes)
    gm = decompose(_fx(_bn, x), variance_f32.DECOMPOSITIONS)
    assert variance_f32.float64_free(gm)
    assert not any(n.target is aten.var_mean.correction for n in gm.graph.nodes)
    for g, w in zip(gm(x), _bn(x)):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: torch.var_mean(x, dim=[0, 2], correction=1, keepdim=False),
    lambda x: torch.std(x, dim=1, keepdim=True),
    lambda x: torch.var(x),
    lambda x: torch.std_mean(x, dim=-1, correction=0),
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_statistics_match_eager(fn, dtype):
    x = (torch.randn(3, 6, 4) * 5 + 100).to(dtype)
    gm = decompose(_fx(fn, x), variance_f32.DECOMPOSITIONS)
    assert variance_f32.float64_free(gm)
    got, want = gm(x), fn(x)
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple)
                                                                 else (want,))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


def test_float64_statistics_are_left_alone():
    gm = decompose(_fx(lambda x: torch.var(x, 0), torch.randn(4, 3, dtype=torch.float64)),
                   variance_f32.DECOMPOSITIONS)
    assert not variance_f32.float64_free(gm)  # the user asked for float64


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_statistics_stay_float32_on_every_target(affine):
    """The cpu target too: eager's layer norm kernel computes in float, and
    torch-mlir decomposes ``var_mean`` through float64."""
    torch.manual_seed(0)
    args = [torch.randn(4, 7, 32) * 3 + 10]
    args += [torch.randn(32), torch.randn(32)] if affine else []

    def ln(x, *affine):
        return aten.native_layer_norm.default(x, [32], *(affine or (None, None)), 1e-5)

    def var_means(gm):
        return sum(n.target is aten.var_mean.correction for n in gm.graph.nodes)
    assert var_means(decompose(_fx(ln, *args))) == 1
    gm = decompose(_fx(ln, *args), variance_f32.LAYER_NORM)
    assert variance_f32.float64_free(gm) and var_means(gm) == 0
    for g, e in zip(gm(*args), ln(*args)):
        assert g.shape == e.shape and g.dtype == e.dtype
        torch.testing.assert_close(g, e, atol=2e-6, rtol=2e-6)


def test_which_targets():
    assert "vulkan" in F32_STATISTICS_TARGETS and "cpu" not in F32_STATISTICS_TARGETS
    assert narrows_int64("vulkan") and not narrows_int64("cpu") and not narrows_int64("cuda")


def test_vulkan_int64_flag_and_opt_out(monkeypatch):
    from lazy_mlir.targets import VULKAN_I64_DEMOTION
    monkeypatch.setenv("LAZY_MLIR_VULKAN_TARGET", "rdna3")
    assert VULKAN_I64_DEMOTION in get_target("vulkan").flags
    monkeypatch.setenv("LAZY_MLIR_VULKAN_INT64", "1")
    assert not narrows_int64("vulkan")
    assert VULKAN_I64_DEMOTION not in get_target("vulkan").flags


def _causal_mask(ids):
    pos = torch.arange(ids.shape[1])
    return (pos[None, :] - pos[:, None]) <= 0, ids.clamp(0, 511)


def _lm_loss(logits, labels):
    return F.cross_entropy(logits.reshape(-1, 16), labels.reshape(-1), ignore_index=-100)


@pytest.mark.parametrize("fn, args", [
    (_causal_mask, (torch.randint(0, 512, (2, 8)),)),
    (lambda a, b: ((a - b) <= 0, (a != -100).sum()), (torch.randint(0, 9, (5,)),
                                                 torch.randint(0, 9, (5,)))),
    (lambda w, i: w[i].sum(), (torch.randn(50, 4), torch.randint(0, 50, (3, 7)))),
    (lambda: torch.arange(1000).reshape(10, 100).argmax(1), ()),
    (lambda x: F.max_pool2d(x, 2, return_indices=True), (torch.randn(2, 3, 8, 8),)),
])
def test_int64_that_fits_is_accepted(fn, args):
    assert int64_range.int64_overflow_reason(_fx(fn, *args)) is None


def test_cross_entropy_backward_fits():
    logits = torch.randn(4, 16, requires_grad=True)

    def step(logits, labels):
        return torch.autograd.grad(_lm_loss(logits, labels), logits)

    gm = decompose(_fx(step, logits, torch.randint(0, 16, (4,))))
    assert int64_range.int64_overflow_reason(gm) is None


@pytest.mark.parametrize("fn, arg", [
    (lambda i: i * 3 + 1, torch.tensor([3, -1, 2])),          # i unbounded in int32
    (lambda x: x.mul(1e10).long(), torch.randn(3)),             # a float cast to int64
    (lambda i: i.cumsum(0), torch.ones(8, dtype=torch.int64)),  # a sum of 8 unbounded
    (lambda i: i + i, torch.ones(3, dtype=torch.int64)),        # a result may leave 2**30
])
def test_int64_that_may_overflow_is_refused(fn, arg):
    why = int64_range.int64_overflow_reason(_fx(fn, arg))
    assert why and "int64" in why


def test_session_checks_int64_data():
    from lazy_mlir.runtime.session import INT64_ON_DEVICE, _int64_as_int32
    ok = torch.tensor([0, -INT64_ON_DEVICE, INT64_ON_DEVICE])
    assert torch.equal(_int64_as_int32(ok, "vulkan"), ok.to(torch.int32))
    with pytest.raises(OverflowError, match="LAZY_MLIR_VULKAN_INT64"):
        _int64_as_int32(torch.tensor([1 << 40]), "vulkan")


def test_clamped_counter_update_fits():
    """BatchNorm's ``num_batches_tracked += 1`` as capture records it on a
    target that narrows int64 (``lazy.bounds.int64_in_band``): accepted."""
    band = int64_range.ARGUMENT

    def update(n):
        new = n + 1
        safe = new.clamp(band[0], band[1])
        return safe, (safe != new).any()
    n = torch.tensor(3)
    assert int64_range.int64_overflow_reason(decompose(_fx(update, n))) is None
    assert int64_range.int64_overflow_reason(decompose(_fx(lambda n: n + 1, n)))


def _grad_sum(w, xs, terms):
    g = xs[0] @ w
    for i in range(1, terms):
        g = g + xs[i] @ w
    return g * 2, xs[0] + xs[1]


def _ops(gm, *ops):
    return sum(n.target in ops for n in gm.graph.nodes)


@pytest.mark.parametrize("terms", [32, 16])
def test_long_sums_become_one_reduction(terms):
    """The LSTM's 32-term gradient sums: IREE fused them into a dispatch
    needing 136 bytes of push constants (lavapipe has 128), or 33 bindings
    (IREE's CPU runtime takes 32)."""
    assert {"cpu", "vulkan", "cuda"} <= WIDE_SUM_TARGETS
    torch.manual_seed(0)
    w, xs = torch.randn(4, 3), torch.randn(terms, 5, 4)
    gm = wide_sums.wide_sums_as_stack(_fx(lambda w, xs: _grad_sum(w, xs, terms), w, xs))
    long_chain = terms > wide_sums.MAX_TERMS
    assert _ops(gm, aten.stack.default) == long_chain
    assert _ops(gm, aten.add.Tensor) == (1 if long_chain else terms)  # xs[0] + xs[1] stays
    for got, want in zip(gm(w, xs), _grad_sum(w, xs, terms)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_a_shared_partial_sum_is_kept():
    """A partial sum read elsewhere ends a chain: the terms after it are
    counted from it, so it is still computed once."""
    def f(xs):
        g = xs[0]
        for i in range(1, 10):
            g = g + xs[i]
        h = g
        for i in range(10, 30):
            h = h + xs[i]
        return h, g
    xs = torch.randn(30, 6)
    gm = wide_sums.wide_sums_as_stack(_fx(f, xs))
    assert _ops(gm, aten.stack.default) == 1 and _ops(gm, aten.add.Tensor) == 9
    for got, want in zip(gm(xs), f(xs)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
