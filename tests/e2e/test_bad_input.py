"""Bad input never crashes: each op matches eager or falls back.

Empty tensors, 0-dim tensors, non-contiguous inputs, NaN and infinities,
integer overflow and integer division by zero, compared with eager PyTorch
on the CPU. Several of these used to kill the process (a SIGFPE in
torch-mlir's lowering of a zero extent, a SIGSEGV on a negative scatter dim).
"""
from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import lazy, same_as_eager

NAN, INF = float("nan"), float("inf")
_no_warning = contextlib.nullcontext


def _same_as_eager(fn, *inputs):
    same_as_eager(fn, *inputs)


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
    # PyTorch's meta kernel raises a TypeError for batch 0: runs eagerly
    "interpolate": (lambda x: F.interpolate(x, scale_factor=2), [(0, 2, 4, 4)]),
}


@pytest.mark.parametrize("name", list(EMPTY_INPUT))
def test_empty_input(name):
    fn, shapes = EMPTY_INPUT[name]
    _same_as_eager(fn, *[_randn(*s, seed=i) for i, s in enumerate(shapes)])


def test_empty_input_error_is_eagers():
    with pytest.raises(RuntimeError, match="size mismatch|shapes cannot be multiplied"):
        lazy(_randn(0, 3)) @ lazy(_randn(4, 2))


def test_empty_input_mm_is_folded(counters):
    """Every input empty: eager's value, computed at capture, no fallback."""
    _same_as_eager(lambda a, b: a @ b, _randn(5, 0), _randn(0, 10))
    assert counters.delta("folded::mm") == 1 and counters.delta("aten::mm") == 0


@pytest.mark.parametrize("name,fn,shape", [
    ("var", lambda x: x.var(0), (0, 3)),
    ("std_mean", lambda x: torch.std_mean(x, 1), (2, 0)),
    ("det", torch.linalg.det, (2, 0, 0)),
    ("slogdet", torch.linalg.slogdet, (0, 0)),
    ("vdot", torch.vdot, (0,)),
])
def test_empty_input_folded_like_eager(name, fn, shape, counters):
    x = _randn(*shape)
    with pytest.warns(UserWarning) if name in ("var", "std_mean") else _no_warning():
        _same_as_eager(fn if name != "vdot" else (lambda a: torch.vdot(a, a)), x)
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and counters.delta(n)]


def test_empty_input_with_data_falls_back(counters):
    """``index_add`` of no rows into a full tensor reads data: not folded."""
    fn, shapes = EMPTY_INPUT["index_add"]
    _same_as_eager(fn, *[_randn(*s, seed=i) for i, s in enumerate(shapes)])
    assert not [n for n in lm.metrics.counter_names() if n.startswith("folded::") and counters.delta(n)]


def test_new_tensors_of_an_empty_tensor_compile(counters):
    """``new_*`` read only the dtype and device of an empty ``self``."""
    _same_as_eager(lambda x: (x.new_ones((2, 3)), x.new_full((4,), 2.5), x.new_zeros(3)),
                   _randn(0, 4))
    assert not [n for n in lm.metrics.counter_names()
                if n.startswith("aten::") and counters.delta(n)]


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


def test_as_strided_to_0d():
    """Used to crash torch-mlir (SIGSEGV/SIGABRT)."""
    _same_as_eager(lambda x: x.as_strided([], [], 5) + 0, _randn(16))
    out = torch.empty_permuted((), (), device="lazy").zero_()
    assert out.shape == () and out.cpu().item() == 0.0


# ------------------------------------------------------- resize_, sparse
def test_resize_keeps_the_first_elements():
    _same_as_eager(lambda x: x.resize_((25, 5)) * 2, _randn(5, 5, 5))
    _same_as_eager(lambda x: x.resize_((2, 3)) + 0, _randn(5, 5))
    _same_as_eager(lambda x, y: x.resize_as_(y) + y, _randn(5, 5, 5), _randn(5, 5, 5, seed=1))
    _same_as_eager(lambda x, y: x.resize_as_(y) + y, _randn(6, 5), _randn(3, 2, seed=1))


def test_resize_cannot_grow_a_lazy_tensor():
    t = lazy(_randn(2, 2))
    with pytest.raises(RuntimeError, match="resize_ cannot grow"):
        t.resize_((3, 3))
    assert t.shape == (2, 2)


@pytest.mark.parametrize("write", [
    lambda host, i: host.__setitem__((i[1], i[0]), 1.0),
    lambda host, i: host.index_add_(0, i[0], torch.ones(3, 3)),
    lambda host, i: host.add_(i.float()[0, 0]),
], ids=["setitem", "index_add_", "add_"])
def test_a_cpu_tensor_written_from_lazy_tensors_raises_eagers_device_error(write):
    # (it raised AttributeError: 'Tensor' object has no attribute '_view')
    host = torch.zeros(3, 3)
    i = torch.tensor([[0, 1, 2], [1, 2, 0]], device="lazy")
    with pytest.raises(RuntimeError, match="same device.*move that tensor to the lazy device"):
        write(host, i)
    assert torch.equal(host, torch.zeros(3, 3))
    host.copy_(i.float().sum(0).expand(3, 3))  # a copy is a transfer: allowed
    assert torch.equal(host[0], torch.tensor([1.0, 3.0, 2.0]))


def test_sparse_tensors_raise_a_clear_error():
    with pytest.raises(RuntimeError, match="sparse_coo tensors are not supported"):
        lazy(_randn(5, 5)).to_sparse()
    with pytest.raises(RuntimeError, match="sparse_coo tensors are not supported"):
        _randn(5, 5).to_sparse().to("lazy")


# -------------------------------------------------- non-contiguous inputs
NON_CONTIGUOUS = {
    "transposed_add": (lambda x: x.t() + 1, (3, 4)),
    "transposed_mm": (lambda x: x.t() @ x, (3, 4)),
    "strided_slice": (lambda x: x[::2, 1::3] * 2, (6, 8)),
    "expanded": (lambda x: x[:, :1].expand(3, 4) + x, (3, 4)),
    "permuted_sum": (lambda x: x.view(2, 3, 4).permute(2, 0, 1).sum(1), (6, 4)),
    "diagonal": (lambda x: x.diagonal() + 1, (4, 4)),
    "as_strided": (lambda x: x.view(-1).as_strided((3, 3), (4, 1), 1) + 0, (4, 4)),
    "unfold_view": (lambda x: x.view(-1).unfold(0, 3, 2) + 0, (2, 5)),
    "write_strided_slice": (lambda x: (x[:, ::2].mul_(2), x)[1], (3, 4)),
    "write_transposed": (lambda x: (x.t().add_(1), x)[1], (3, 4)),
    "index_transposed": (lambda x: x.t()[torch.tensor([0, 2], device=x.device)], (4, 5)),
    "scatter_into_transposed": (lambda x: x.t().scatter_add(
        1, torch.tensor([[0, 1], [2, 3], [1, 1]], device=x.device), x[:3, :2]), (4, 3)),
    "conv_of_strided_slice": (lambda x: F.conv2d(x.view(1, 2, 9, 9)[:, :, ::2, ::2],
                                                 x.view(-1)[:54].view(3, 2, 3, 3)), (2, 81)),
    "softmax_of_transposed": (lambda x: x.t().softmax(-1), (3, 4)),
    "cat_of_transposed": (lambda x: torch.cat([x.t(), x.t()], 1), (3, 4)),
}


@pytest.mark.parametrize("name", list(NON_CONTIGUOUS))
def test_non_contiguous(name):
    fn, shape = NON_CONTIGUOUS[name]
    _same_as_eager(fn, _randn(*shape))


def test_non_contiguous_host_input():
    _same_as_eager(lambda x: x + 0, _randn(4, 3).t())


# IREE's data-tiled convolutions miscompiled this; the cpu target no longer
# data-tiles convolutions (pipeline/targets.py CONV_DATA_TILING).
def test_conv_of_spatially_transposed_input():
    _same_as_eager(lambda x, w: F.conv2d(x.transpose(2, 3), w), _randn(1, 2, 5, 5),
                   _randn(3, 2, 3, 3, seed=1))


# ------------------------------------------------------- NaN and infinities
def _special():
    return torch.tensor([[NAN, INF, -INF, 1.0], [0.0, -0.0, 2.5, NAN], [-INF, 3.0, INF, -1.0]])


SPECIAL_VALUES = {
    "add": lambda x: x + 1,
    "exp": lambda x: x.exp(),
    "log": lambda x: x.log(),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "relu": lambda x: x.relu(),
    "sum": lambda x: x.sum(1),
    "mean": lambda x: x.mean(),
    "amax": lambda x: x.amax(1),
    "max_dim": lambda x: x.max(1)[0],
    "argmax": lambda x: x.argmax(1),  # the first NaN (nan_decompositions.py)
    "argmin_keepdim": lambda x: x.argmin(0, keepdim=True),
    "argmax_flat": lambda x: x.argmax(),
    "max_dim_indices": lambda x: x.max(1)[1],
    "min_dim_indices": lambda x: x.min(1)[1],
    "cumsum": lambda x: x.cumsum(1),
    "softmax": lambda x: x.softmax(1),
    "matmul": lambda x: x @ torch.ones(4, 2, device=x.device),
    "eq": lambda x: x == x,
    "isnan": lambda x: x.isnan(),
    "where": lambda x: torch.where(x.isnan(), torch.zeros_like(x), x),
    "nan_to_num": lambda x: torch.nan_to_num(x),
    "max_pool2d": lambda x: F.max_pool2d(x.view(1, 1, 3, 4), 2),
    "div_by_zero": lambda x: x / torch.zeros_like(x),
    "floor_divide_by_zero": lambda x: torch.floor_divide(x, torch.zeros_like(x)),
    "remainder_by_zero": lambda x: torch.remainder(x, torch.zeros_like(x)),
    # lowered as compare-and-select, which dropped a NaN first operand
    "minimum": lambda x: torch.minimum(x, torch.zeros_like(x)),
    "maximum_both_nan": lambda x: torch.maximum(x, x.flip(0)),
    "clamp": lambda x: x.clamp(-1, 1),
    "sort": lambda x: x.sort(1)[0],  # NaN last (sort_decompositions.py)
    "topk": lambda x: x.topk(2, 1)[0],  # NaN the largest, as the sort
    "topk_smallest": lambda x: x.topk(3, 1, largest=False)[0],
    "clamp_min": lambda x: x.clamp(min=0.5),
    "clamp_tensor": lambda x: x.clamp(torch.zeros_like(x), torch.ones_like(x)),
    "hardtanh": lambda x: F.hardtanh(x),
    "relu6": lambda x: F.relu6(x),
}


@pytest.mark.parametrize("name", list(SPECIAL_VALUES))
def test_nan_and_inf(name):
    _same_as_eager(SPECIAL_VALUES[name], _special())


# ----------------------------------------------------------------- integers
def _i64(*v):
    return torch.tensor(v, dtype=torch.long)


BIG = 2 ** 62
INT_OVERFLOW = {  # two's complement wraparound, as eager
    "add": (lambda a, b: a + b, _i64(BIG, 2 ** 63 - 1), _i64(BIG, 1)),
    "mul": (lambda a, b: a * b, _i64(BIG, -BIG), _i64(4, 4)),
    "neg_min": (lambda a, b: -a, _i64(-2 ** 63, 5), _i64(0, 0)),
    "abs_min": (lambda a, b: a.abs(), _i64(-2 ** 63, -5), _i64(0, 0)),
    "sum": (lambda a, b: a.sum(), _i64(BIG, BIG, BIG), _i64(0, 0, 0)),
    "cumsum": (lambda a, b: a.cumsum(0), _i64(BIG, BIG, BIG), _i64(0, 0, 0)),
    "mm": (lambda a, b: a.view(2, 1) @ b.view(1, 2), _i64(BIG, 3), _i64(4, -4)),
    "int32_add": (lambda a, b: a.int() + b.int(), _i64(2 ** 31 - 1), _i64(1)),
    "uint8_add": (lambda a, b: a.to(torch.uint8) + b.to(torch.uint8), _i64(250), _i64(10)),
    "floor_divide_min_by_minus_one": (lambda a, b: torch.floor_divide(a, b), _i64(-2 ** 63, 7),
                                      _i64(-1, 2)),
    # -1 divisors: the smallest integer's quotient overflows, and x86's idiv
    # traps (SIGFPE killed the process); eager wraps, its remainder is 0.
    "remainder_min_by_minus_one": (lambda a, b: torch.remainder(a, b), _i64(-2 ** 63, 7),
                                   _i64(-1, 2)),
    "fmod_min_by_minus_one": (lambda a, b: torch.fmod(a, b), _i64(-2 ** 63, 7), _i64(-1, 2)),
    "int32_floor_divide_min_by_minus_one": (lambda a, b: a.int() // b.int(),
                                            _i64(-2 ** 31, 7), _i64(-1, 2)),
    "floor_divide_by_number_minus_one": (lambda a, b: a // -1 + a % -1, _i64(-2 ** 63, 7),
                                         _i64(0, 0)),
    "int32_min_by_int64_minus_one": (lambda a, b: a.int() // b, _i64(-2 ** 31, 7),
                                     _i64(-1, 2)),
    "floor_divide_signs": (lambda a, b: torch.floor_divide(a, b), _i64(-7, 7, -7), _i64(2, -2, -2)),
    "remainder_signs": (lambda a, b: torch.remainder(a, b), _i64(-7, 7, -7), _i64(2, -2, -2)),
    "fmod_signs": (lambda a, b: torch.fmod(a, b), _i64(-7, 7, -7), _i64(2, -2, -2)),
    "true_divide_by_zero": (lambda a, b: a / b, _i64(5, -5, 0), _i64(0, 0, 0)),
    "to_float": (lambda a, b: a.float(), _i64(BIG, -BIG), _i64(0, 0)),
}


@pytest.mark.parametrize("name", list(INT_OVERFLOW))
def test_integer_overflow(name):
    fn, a, b = INT_OVERFLOW[name]
    _same_as_eager(fn, a, b)


INT_DIVISION_BY_ZERO = {
    "floor_divide": lambda a, b: torch.floor_divide(a, b),
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "remainder": lambda a, b: torch.remainder(a, b),
    "fmod": lambda a, b: torch.fmod(a, b),
    "floor_divide_scalar": lambda a, b: a // 0,
}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("name", list(INT_DIVISION_BY_ZERO))
def test_integer_division_by_zero_raises_as_in_eager(name, dtype):
    """Eager raises ZeroDivisionError; so does the lazy device (a host
    divisor at capture; computed divisors at the next sync point:
    test_zero_division.py), and the process survives."""
    fn = INT_DIVISION_BY_ZERO[name]
    a, b = _i64(5, -5, 0).to(dtype), _i64(0, 0, 0).to(dtype)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(lazy(a), lazy(b)).cpu()
    assert torch.equal((lazy(a) // 2).cpu(), a // 2)  # the device still works



def test_std_and_var_of_lazy_tensors_warn_nothing_eager_does_not():
    # Eager's own checks, probed on one-element tensors, warned "degrees of
    # freedom is <= 0" at every first std/var of a signature (lazy/eager_checks.py).
    import warnings
    x = lazy(_randn(5, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [x.std(), x.var(0), x.std(1, correction=0), *torch.var_mean(x, 1)]
        lm.mark_step()
    assert [str(w.message) for w in caught] == []
    torch.testing.assert_close(out[0].cpu(), x.cpu().std())
