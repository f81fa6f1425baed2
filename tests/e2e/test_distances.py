"""cdist and pdist compiled (no fallback) and equal to eager, NaN and
infinities included, on both of cdist's routes (the direct reduction and the
matmul formula above 25 rows), empty and broadcast batches
(``dialects/distance_decompositions.py``)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import Counters, lazy

NAN, INF = float("nan"), float("inf")


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _special(*shape, seed=0):
    """Random rows with NaN, +-inf and zeros planted."""
    x = _x(*shape, seed=seed)
    flat = x.view(-1)
    flat[1], flat[5], flat[6], flat[-2] = NAN, INF, -INF, 0.0
    return x


def _compiled_as_eager(fn, *inputs, rtol=1.3e-6, atol=1e-5):
    before = {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}
    expected = fn(*[t.clone() for t in inputs])
    actual = fn(*[lazy(t) for t in inputs])
    assert actual.device.type == "lazy" and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=rtol, atol=atol)
    fell_back = {n: lm.metrics.counter_value(n) - before.get(n, 0)
                 for n in lm.metrics.counter_names() if n.startswith("aten::")}
    assert not any(fell_back.values()), fell_back


PS = [0.0, 1.0, 2.0, 1.5, 0.5, INF]


def test_cdist_direct_special_values():
    # cdist's scalar inf-norm skips a NaN difference; pdist's vectorised one does not
    x1, x2 = _special(2, 4, 3, seed=1), _special(2, 5, 3, seed=2)
    inf_norm = torch.cdist(x1, x2, p=INF)
    assert inf_norm.isnan().sum() < torch.cdist(x1, x2, p=1.0).isnan().sum()
    _compiled_as_eager(lambda a, b: torch.stack([torch.cdist(a, b, p=p) for p in PS]), x1, x2,
                       rtol=1e-4)


def test_cdist_matmul_route_and_broadcast_batch():
    # 30 rows: the default compute mode takes _euclidean_dist's matmul formula
    x1, x2 = _x(2, 1, 30, 4, seed=3), _x(3, 7, 4, seed=4)
    x1[0, 0, 3, 1] = NAN
    _compiled_as_eager(lambda a, b: torch.cdist(a, b), x1, x2, rtol=1e-4, atol=1e-4)
    _compiled_as_eager(lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"),
                       x1, x2, rtol=1e-4, atol=1e-4)


def test_cdist_empty():
    _compiled_as_eager(lambda a, b: torch.cdist(a, b, p=1.0), _x(0, 4, 3), _x(5, 3))
    _compiled_as_eager(lambda a, b: torch.cdist(a, b, p=3.0), _x(2, 4, 0), _x(2, 5, 0))


def test_pdist_special_values():
    x = _special(6, 3, seed=5)
    _compiled_as_eager(lambda a: torch.stack([torch.nn.functional.pdist(a, p=p) for p in PS]),
                       x, rtol=1e-4)


def test_pdist_small_and_empty():
    _compiled_as_eager(lambda a: torch.nn.functional.pdist(a), _x(1, 4))
    _compiled_as_eager(lambda a: torch.nn.functional.pdist(a), _x(4, 0))


_PLAIN, _BATCHED = ((5, 4), (7, 4)), ((2, 3, 4), (1, 6, 4))


@pytest.mark.parametrize("p,shapes", [(1.0, _PLAIN), (2.0, _BATCHED), (0.5, _PLAIN),
                                      (1.5, _BATCHED), (3.0, _PLAIN), (INF, _BATCHED),
                                      (0.0, _PLAIN)])
def test_cdist_backward_compiles_with_eagers_gradients(p, shapes):
    """``_cdist_backward`` (the direct route's gradient) ran eagerly: a host
    round trip each step of a metric-learning loss. A pair at distance 0
    takes the kernels' 0."""
    torch.manual_seed(0)
    a, b = torch.randn(*shapes[0], dtype=torch.float64), torch.randn(*shapes[1], dtype=torch.float64)
    a[..., 0, :] = b[..., 0, :]
    grads, c = [], Counters()
    for dev in ("cpu", "lazy"):
        x, y = (t.to(dev).detach().requires_grad_() for t in (a, b))
        d = torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist")
        weights = torch.arange(d.numel(), dtype=d.dtype).reshape(d.shape).to(dev)
        (d * weights).sum().backward()
        grads.append((x.grad.cpu(), y.grad.cpu()))
    for want, got in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert c.fell_back() == []


@pytest.mark.parametrize("p", [1.0, 2.0, 0.5, 1.5, 3.0, INF, 0.0])
def test_pdist_backward_compiles_with_eagers_gradients(p):
    """``_pdist_backward`` ran eagerly: a host round trip each step of a
    triplet or contrastive loss on ``F.pdist``. Rows 1 and 3 are equal (a
    pair at distance 0 takes the kernel's 0)."""
    torch.manual_seed(0)
    a = torch.randn(6, 4, dtype=torch.float64)
    a[3] = a[1]
    grads, c = [], Counters()
    for dev in ("cpu", "lazy"):
        x = a.to(dev).detach().requires_grad_()
        d = torch.nn.functional.pdist(x, p=p)
        (d * torch.arange(d.numel(), dtype=d.dtype).to(dev)).sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)
    assert c.fell_back() == []
