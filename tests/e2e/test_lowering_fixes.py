"""Ops torch-mlir imports but did not lower (they fell back) now compile
through ``dialects/lowering_decompositions.py`` and match eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, finish_step, lazy


def _compiled(fn, *inputs, counters, **close):
    """``fn`` on lazy copies of ``inputs`` equals eager and nothing fell back."""
    counters.snapshot()
    out = fn(*(lazy(t) for t in inputs))
    lm.mark_step()
    expected = fn(*inputs)
    outs, exps = (out, expected) if isinstance(out, tuple) else ((out,), (expected,))
    for o, e in zip(outs, exps):
        assert_lazy_close(o, e, **close)
    fell_back = [n for n in lm.metrics.counter_names()
                 if n.startswith("aten::") and counters.delta(n)]
    assert not fell_back, fell_back


# Reductions and scans over dim 0 / -1 of a 0-d tensor (one graph for all).
RANK0 = [
    lambda x: torch.amax(x, 0), lambda x: torch.amin(x, -1, keepdim=True),
    lambda x: torch.argmax(x), lambda x: torch.argmin(x, 0, keepdim=True),
    lambda x: torch.all(x, 0), lambda x: torch.any(x, -1),
    lambda x: torch.max(x, 0), lambda x: torch.min(x, 0, keepdim=True),
    lambda x: torch.prod(x, 0), lambda x: torch.cumsum(x, 0),
    lambda x: torch.cumprod(x, -1),
    lambda x: torch.logsumexp(x, 0),
]  # logcumsumexp: captured as a decomposition (dialects/precise_decompositions.py)


def test_reductions_of_a_0d_tensor(counters):
    x = torch.tensor(0.75)
    def all_of(t):
        outs = [f(t) for f in RANK0]
        return tuple(o for out in outs for o in (out if isinstance(out, tuple) else (out,)))
    _compiled(all_of, x, counters=counters)


@pytest.mark.parametrize("value", [True, False])
def test_a_0d_cumsum_of_bools_into_a_bool_compiles(value, counters):
    """Fuzzer seeds 960345, 980123: ``cumsum(b, 0, out=bool_0d)`` (and of
    bools into int64, and of a float into float64) reached IREE 3.13 as a
    one-element ``i1`` scan it failed to compile: the graph ran eagerly,
    ``lm.jit`` raised. A 0-d cumsum is its element, converted."""
    def scans(b):
        into = torch.empty((), dtype=torch.bool, device=b.device)
        torch.cumsum(b, 0, out=into)
        return into, torch.cumsum(b, 0), torch.cumsum(b.float() + 0.5, 0, dtype=torch.float64)

    b = torch.tensor(value)
    _compiled(scans, b, counters=counters)
    got = lm.jit(scans).lower(b).compile()(b)
    assert all(torch.equal(g, w) for g, w in zip(got, scans(b)))


def test_reductions_of_a_1d_tensor_unchanged(counters):
    x = torch.randn(3, 5)
    _compiled(lambda t: (torch.amax(t, 1), torch.argmax(t, 0), torch.cumsum(t, 1)), x,
              counters=counters)


def test_log10(counters):
    x = torch.rand(4, 6) * 100 + 1e-3
    _compiled(torch.log10, x, counters=counters)


def test_copy_views(counters):
    x = torch.randn(2, 3, 4)
    _compiled(lambda t: (torch.permute_copy(t, (2, 0, 1)), torch.view_copy(t, (6, 4)),
                         torch.as_strided_copy(t, (2, 2), (1, 2), 1),
                         *torch.unbind_copy(t, 1)), x, counters=counters)


def test_new_empty_strided_shape():
    x = torch.randn(5, 5)
    out = lazy(x).new_empty_strided((2, 3), (3, 1)).fill_(1.5)
    assert_lazy_close(out, torch.full((2, 3), 1.5))


@pytest.mark.parametrize("align_corners", [True, False])
def test_upsample_bilinear(align_corners, counters):
    x = torch.randn(1, 2, 4, 5)
    _compiled(lambda t: F.interpolate(t, size=(7, 3), mode="bilinear",
                                      align_corners=align_corners), x, counters=counters)


def test_cumprod_with_dtype(counters):
    x = torch.randn(4, 3)
    _compiled(lambda t: torch.cumprod(t, 1, dtype=torch.float32), x, counters=counters)


def test_scatter_with_reduce(counters):
    x, src = torch.randn(6, 4), torch.randn(5, 4)
    index = torch.tensor([[0, 1, 2, 3], [0, 0, 5, 5], [1, 1, 1, 1], [5, 4, 3, 2], [0, 5, 0, 5]])
    _compiled(lambda t, i, s: (torch.scatter(t, 0, i, s, reduce="add"),
                               torch.scatter(t, 0, i, s, reduce="multiply")),
              x, index, src, counters=counters)


def test_diagonal_and_as_strided_scatter(counters):
    x, d4, d3, s = torch.randn(4, 6), torch.randn(4), torch.randn(3), torch.randn(2, 2)
    _compiled(lambda t, a, b, c: (torch.diagonal_scatter(t, a, 2), torch.diagonal_scatter(t, b, -1),
                                  torch.as_strided_scatter(t, c, (2, 2), (1, 6), 3)),
              x, d4, d3, s, counters=counters)


def test_max_pool_ceil_mode_and_integers(counters):
    x = torch.randn(2, 3, 7, 6)
    i = torch.randint(-50, 50, (1, 2, 6, 5))
    _compiled(lambda t, u: (*F.max_pool2d(t, 3, 2, 1, ceil_mode=True, return_indices=True),
                            F.max_pool2d(u, 2), F.max_pool1d(t[0], 2, ceil_mode=True)),
              x, i, counters=counters)


def test_erfinv(counters):
    x = torch.cat([torch.linspace(-1, 1, 801), torch.tensor([1 - 1e-7, -0.0, 1e-30, 1.5,
                                                             float("nan")])])
    counters.snapshot()
    out = torch.erfinv(lazy(x))
    lm.mark_step()
    torch.testing.assert_close(out.cpu(), torch.erfinv(x), equal_nan=True)
    assert not counters.delta("aten::erfinv")


def test_unbatched_max_pool_and_avg_pool3d_tail(counters):
    x, v = torch.randn(4, 5, 7), torch.randn(2, 3, 3, 4, 5)
    _compiled(lambda t, u: (*F.max_pool2d(t, 2, (2, 1), return_indices=True),
                            F.adaptive_max_pool2d(t, (2, 3)), F.avg_pool3d(u, 2)),
              x, v, counters=counters)


def test_kthvalue_falls_back_up_front(counters):
    """Denied in support.py: it runs eagerly without a failed compile first."""
    x = torch.randn(3, 5)
    counters.snapshot()
    values, indices = torch.kthvalue(lazy(x), 2, 1)
    lm.mark_step()
    expected = torch.kthvalue(x, 2, 1)
    torch.testing.assert_close(values.cpu(), expected.values)
    torch.testing.assert_close(indices.cpu(), expected.indices)
    assert counters.delta("aten::kthvalue") == 1
    assert counters.delta("UncachedCompile") == 0


def test_nonzero_static(counters):
    """Values only: the meta kernel's strides differ from the CPU kernel's."""
    x = torch.tensor([[0.0, 1.5, 0.0], [2.0, 0.0, -3.0]])
    counters.snapshot()
    outs = [torch.nonzero_static(lazy(x), size=2), torch.nonzero_static(lazy(x), size=5,
                                                                        fill_value=-4)]
    lm.mark_step()
    torch.testing.assert_close(outs[0].cpu(), torch.nonzero_static(x, size=2))
    torch.testing.assert_close(outs[1].cpu(), torch.nonzero_static(x, size=5, fill_value=-4))
    assert not counters.delta("aten::nonzero_static")


def test_linalg_qr_is_decomposed_not_lowered(counters):
    """torch-mlir has no lowering for linalg_qr (denied): it is captured as
    the unrolled Householder QR (linalg_qr_decompositions.py) instead."""
    x = torch.randn(4, 3)
    counters.snapshot()
    q, r = torch.linalg.qr(lazy(x))
    lm.mark_step()
    expected = torch.linalg.qr(x)
    torch.testing.assert_close(q.cpu(), expected[0])
    torch.testing.assert_close(r.cpu(), expected[1])
    assert counters.delta("aten::linalg_qr") == 0
    assert counters.delta("decomposed::linalg_qr") == 1


def test_fmax_fmin_of_broadcast_operands(counters):
    a = torch.tensor([[1.0, float("nan"), -2.0]])
    b = torch.tensor([[0.5], [float("nan")]])
    c = torch.tensor(0.25)
    _compiled(lambda x, y, z: (torch.fmax(x, y), torch.fmin(x, y), torch.fmax(x, z)), a, b, c,
              counters=counters, equal_nan=True)


def test_addbmm_integers(counters):
    x, b1, b2 = (torch.randint(-9, 9, s) for s in ((1,), (4, 2, 3), (4, 3, 5)))
    _compiled(lambda t, u, v: (torch.addbmm(t, u, v), torch.addbmm(t, u, v, beta=2, alpha=-3)),
              x, b1, b2, counters=counters)


def test_negative_padding_crops(counters):
    """``constant_pad_nd`` with negative pads (the input gradient of a padded
    depthwise convolution) as a slice and a pad: IREE refuses a negative
    ``tensor.pad``."""
    x = torch.randn(2, 3, 5, 6)
    _compiled(lambda t: (F.pad(t, (-1, 2, -2, -1)), F.pad(t, (1, -3), value=0.5)),
              x, counters=counters)


def test_int64_floor_division_is_exact_past_2_to_the_53():
    """torch-mlir floor-divides int64 in float64: ``x // 3`` of 2**62 + 1
    came back off by 85, silently (fuzzer seed 801059, a ``floor_divide_``
    of a float64's bits). Truncating division, exact, corrected by the
    remainder's sign; lm.jit and torch.compile graphs take the same path."""
    import lazy_mlir as lm
    from e2e_helpers import Counters, lazy
    x = torch.tensor([2 ** 62 + 1, -(2 ** 62) - 7, 4607182418800017408, 7, -7, 0, 6])
    d = torch.tensor([3, 3, -5, -2, 2, 7, -3])
    ops = [lambda a, b: a // 3, lambda a, b: a // b, lambda a, b: a.floor_divide(-3),
           lambda a, b: torch.div(a, b, rounding_mode="floor")]
    c = Counters()
    got = [f(lazy(x), lazy(d)) for f in ops]
    lm.mark_step()
    for f, g in zip(ops, got):
        assert torch.equal(g.cpu(), f(x, d)), (g.cpu(), f(x, d))
    assert not c.fell_back()


def test_trunc_division_of_the_smallest_integer_by_minus_one_wraps():
    """x86's idiv traps on -2**63 / -1 (SIGFPE: lm.jit and the lazy device
    died; eager's trunc kernel dies too, its floor_divide wraps). Compiled,
    a -1 divisor is a negation: the quotient wraps as floor_divide's does."""
    import lazy_mlir as lm
    from e2e_helpers import Counters, lazy
    c = Counters()
    for dtype in (torch.int64, torch.int32):
        low = torch.iinfo(dtype).min
        for n in (2, 16):  # (whether the kernel traps depends on its vector shape)
            x = torch.tensor([low, 7, -7, 0] * 4, dtype=dtype)[:n]
            d = torch.tensor([-1, -1, 2, -1] * 4, dtype=dtype)[:n]
            got = torch.div(lazy(x), lazy(d), rounding_mode="trunc")
            by_number = torch.div(lazy(x), -1, rounding_mode="trunc")
            lm.mark_step()
            assert got.cpu().tolist() == ([low, -7, -3, 0] * 4)[:n]
            assert by_number.cpu().tolist() == ([low, -7, 7, 0] * 4)[:n]
    assert not c.fell_back()


def test_weighted_losses_compile(counters):
    """A product with a broadcast operand reduced whole (a per-class weight:
    ``binary_cross_entropy_with_logits(x, t, weight=w)``, ``(d ** 2 * w).mean()``)
    failed in IREE ("'vector.contract' op invalid accumulator/result vector
    shape") and the whole training step ran eagerly, every step
    (``passes/whole_sums.py``)."""
    losses = {}
    for device in ("cpu", "lazy"):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 5).to(device)
        w = torch.tensor([0.5, 1.0, 2.0, 1.5, 0.25], device=device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        counters.snapshot()
        losses[device] = []
        for step in range(3):
            g = torch.Generator().manual_seed(step)
            x, t = torch.randn(6, 4, generator=g).to(device), torch.rand(6, 5, generator=g).to(device)
            out = model(x)
            loss = F.binary_cross_entropy_with_logits(out, t, weight=w) + \
                ((out - t) ** 2 * w).mean() + (out * w).sum() * 1e-3
            losses[device].append(finish_step(loss, opt, device))
    torch.testing.assert_close(losses["lazy"], losses["cpu"], rtol=1e-5, atol=1e-6)
    assert counters.delta("EagerGraph") == 0 and counters.delta("UncachedCompile") >= 1
