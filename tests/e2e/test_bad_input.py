"""Bad input never crashes: each op matches eager or falls back.

Empty tensors, 0-dim tensors, non-contiguous inputs, NaN and infinities,
integer overflow and integer division by zero, compared with eager PyTorch
on the CPU. Several of these used to kill the process (a SIGFPE in
torch-mlir's lowering of a zero extent, a SIGSEGV on a negative scatter dim).
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy

NAN, INF = float("nan"), float("inf")


def _same_as_eager(fn, *inputs):
    """``fn`` on lazy copies of ``inputs`` gives what it gives eagerly."""
    expected = fn(*[t.clone() for t in inputs])
    actual = fn(*[lazy(t) for t in inputs])
    if isinstance(expected, torch.Tensor):
        expected, actual = [expected], [actual]
    for a, e in zip(actual, expected):
        assert a.device.type == "lazy" and a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, check_stride=False)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _index(high, *shape, seed=1):
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------ empty tensors
# Ops whose result is empty (used to SIGFPE in the linalg pipeline).
EMPTY_RESULT = {
    "repeat": (lambda x: x.repeat(0), [(0,)]),
    "multi_dot": (lambda a, b: torch.linalg.multi_dot([a, b]), [(0, 2), (2, 2)]),
    "bilinear": (lambda a, b, w, c: F.bilinear(a, b, w, c), [(0, 3), (0, 4), (5, 3, 4), (5,)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 1), [(1, 0, 1, 1)]),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 1), [(1, 0, 1, 1)]),
    "unfold": (lambda x: F.unfold(x, 2, 1, 0, 1), [(0, 1, 5, 5)]),
    "stack": (lambda a, b: torch.stack([a, b]), [(0, 3), (0, 3)]),
    "add": (lambda x: x + 1, [(0, 3)]),
    "softmax": (lambda x: x.softmax(-1), [(0, 3)]),
    "layer_norm": (lambda x: F.layer_norm(x, (4,)), [(0, 4)]),
    "conv2d": (lambda x, w: F.conv2d(x, w), [(0, 2, 5, 5), (3, 2, 3, 3)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(0, 2, 4, 4)]),
    "cumsum": (lambda x: x.cumsum(0), [(0, 3)]),
    "sort": (lambda x: x.sort(0)[0], [(0, 3)]),
    "inplace_add": (lambda x: x.add_(2), [(0, 3)]),
    "view_of_empty": (lambda x: x[1:1].t() * 2, [(4, 3)]),
}


@pytest.mark.parametrize("name", list(EMPTY_RESULT))
def test_empty_result(name, counters):
    fn, shapes = EMPTY_RESULT[name]
    _same_as_eager(fn, *[_randn(*s, seed=i) for i, s in enumerate(shapes)])
    assert counters.delta("UncachedCompile") == 0  # nothing to compute


# Ops reading an empty tensor and making a non-empty one: compiled when known
# right, else eager (``var`` of nothing is NaN; mm of 5x0 by 0x10 is zeros).
EMPTY_INPUT = {
    "mm": (lambda a, b: a @ b, [(5, 0), (0, 10)]),
    "einsum": (lambda a, b: torch.einsum("ij,jk->ik", a, b), [(3, 0), (0, 2)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), [(3, 0), (4, 0), (4,)]),
    "sum": (lambda x: x.sum(0), [(0, 3)]),
    "mean": (lambda x: x.mean(), [(0, 3)]),
    "var": (lambda x: x.var(0), [(0, 3)]),
    "logsumexp": (lambda x: torch.logsumexp(x, 0), [(0, 3)]),
    "cat": (lambda a, b: torch.cat([a, b]), [(0, 3), (2, 3)]),
    "cat_legacy_1d": (lambda a, b: torch.cat([a, b]), [(0,), (2, 3)]),
    "index_add": (lambda x, s: x.index_add(0, torch.zeros(0, dtype=torch.long, device=x.device), s),
                  [(4, 3), (0, 3)]),
    "scatter_add": (lambda x, s: x.scatter_add(0, torch.zeros(0, 3, dtype=torch.long,
                                                              device=x.device), s),
                    [(4, 3), (0, 3)]),
    "slice_sum": (lambda x: x[2:2].sum(0), [(4, 3)]),
}


@pytest.mark.parametrize("name", list(EMPTY_INPUT))
def test_empty_input(name):
    fn, shapes = EMPTY_INPUT[name]
    _same_as_eager(fn, *[_randn(*s, seed=i) for i, s in enumerate(shapes)])


def test_empty_input_mm_falls_back(counters):
    """Visible in metrics, not silently compiled."""
    _same_as_eager(lambda a, b: a @ b, _randn(5, 0), _randn(0, 10))
    assert counters.delta("aten::mm") == 1


# ------------------------------------------------------------ negative dims
# torch-mlir lowers a negative scatter dim out of bounds (SIGSEGV).
NEGATIVE_DIM = {
    "scatter_add": lambda x, i, s: x.scatter_add(-1, i, s),
    "scatter_src": lambda x, i, s: x.scatter(-1, i, s),
    "scatter_value": lambda x, i, s: x.scatter(-1, i, 2.0),
    "scatter_reduce": lambda x, i, s: x.scatter_reduce(-1, i, s, "amax"),
    "scatter_add_m2": lambda x, i, s: x.scatter_add(-2, i, s),
    "gather": lambda x, i, s: x.gather(-1, i),
    "index_select": lambda x, i, s: x.index_select(-1, i[0]),
}


@pytest.mark.parametrize("name", list(NEGATIVE_DIM))
def test_negative_dim(name):
    _same_as_eager(NEGATIVE_DIM[name], _randn(10, 5), _index(5, 5, 5), _randn(5, 5, seed=2))


def test_scatter_0d_negative_dim():
    _same_as_eager(lambda x, i, s: x.scatter(-1, i, s), torch.tensor(1.0), torch.tensor(0),
                   torch.tensor(5.0))


# ----------------------------------------------------------- 0-dim tensors
ZERO_DIM = {
    "softmax": lambda x: x.softmax(0),  # used to hang in the linalg pipeline
    "log_softmax": lambda x: x.log_softmax(-1),
    "sum_dim": lambda x: x.sum(0),
    "cumsum": lambda x: x.cumsum(0),
    "argmax": lambda x: x.argmax(),
    "topk": lambda x: x.topk(1)[0],
    "sort": lambda x: x.sort()[0],
    "flip": lambda x: x.flip(0),
    "unsqueeze_add": lambda x: x.unsqueeze(0) + 1,
    "expand": lambda x: x.expand(3, 2) * 2,
    "mul_1d": lambda x: x * torch.arange(3.0, device=x.device),
    "gather": lambda x: x.gather(0, torch.tensor(0, device=x.device)),
    "index_1d_by_0d": lambda x: torch.arange(5.0, device=x.device)[x.long()],
    "take": lambda x: torch.take(x, torch.tensor(0, device=x.device)),
}


@pytest.mark.parametrize("name", list(ZERO_DIM))
def test_zero_dim(name):
    _same_as_eager(ZERO_DIM[name], torch.tensor(2.0))

