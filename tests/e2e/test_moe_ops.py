"""The ops of ``transformers``' mixture-of-experts layers compile: an
integer ``histc`` (tokens per expert; the CPU has no such kernel, so the
program died in the fallback) and ``torch._grouped_mm`` with its backward
(it ran eagerly, cutting every step into many graphs)."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import lazy


def test_integer_histc_counts_as_the_float_one(counters):
    ids = torch.tensor([[3, 0, 1], [3, 7, 2], [1, 1, 9]], dtype=torch.int32)
    cases = [dict(bins=4, min=0, max=3), dict(bins=3), dict(bins=5, min=1, max=8)]
    counters.snapshot()
    outs = [torch.histc(lazy(ids), **case) for case in cases]
    lm.mark_step()
    for out, case in zip(outs, cases):
        want = torch.histc(ids.double(), **case).to(torch.int32)
        assert out.dtype == torch.int32
        assert torch.equal(out.cpu(), want), (case, out.cpu(), want)
    assert not counters.fell_back(), counters.fell_back()


def _experts(x, w, offs):
    return torch._grouped_mm(x, w, offs=offs)


def test_grouped_mm_and_its_backward_match_eager(counters):
    torch.manual_seed(0)
    x, w = torch.randn(6, 8), torch.randn(3, 8, 4)
    offs = torch.tensor([2, 2, 5], dtype=torch.int32)  # an empty group; row 5 in none
    xe, we = x.clone().requires_grad_(), w.clone().requires_grad_()
    (_experts(xe, we, offs)[:5] ** 2).sum().backward()
    xl, wl = lazy(x).requires_grad_(), lazy(w).requires_grad_()
    counters.snapshot()
    out = _experts(xl, wl, lazy(offs))
    (out[:5] ** 2).sum().backward()
    lm.mark_step()
    torch.testing.assert_close(out.cpu()[:5], _experts(x, w, offs)[:5])
    assert torch.equal(out.cpu()[5], torch.zeros(4))  # (eager leaves it uninitialized)
    torch.testing.assert_close(xl.grad.cpu()[:5], xe.grad[:5])
    torch.testing.assert_close(wl.grad.cpu(), we.grad)
    assert not counters.fell_back(), counters.fell_back()


def test_grouped_mm_by_columns(counters):
    torch.manual_seed(1)
    a, b = torch.randn(3, 4, 8), torch.randn(8, 12)
    offs = torch.tensor([4, 8, 12], dtype=torch.int32)
    b_eager = b.t().contiguous().t()  # (the CPU kernel wants it column-major)
    counters.snapshot()
    out = torch._grouped_mm(lazy(a), lazy(b), offs=lazy(offs))
    lm.mark_step()
    torch.testing.assert_close(out.cpu(), torch._grouped_mm(a, b_eager, offs=offs))
    assert not counters.fell_back(), counters.fell_back()
