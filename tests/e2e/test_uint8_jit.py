"""uint8 under every path: ``lm.jit``, the lazy device and
``torch.compile(backend="lazy_mlir")`` give eager's values (issue 54).

torch-mlir lowers ui8 as signless i8 and many lowerings take it as signed:
``max()`` of uint8 crashed the process (lm.jit; the lazy device's compile
worker, then the graph ran eagerly), ``topk``, ``clamp``, ``x / 3``,
``sum`` took 200 as -56. ``ops/uint8_promotion.py`` computes those ops in
int32 at import, which every path goes through. A number beside a uint8
tensor is converted as eager converts it (``x > 300`` is ``x > 44``).
"""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import lazy

X = torch.tensor([200, 3, 130, 7, 255, 128, 0], dtype=torch.uint8)
Y = torch.tensor([3, 200, 129, 7, 0, 127, 255], dtype=torch.uint8)

OPS = {
    "max": lambda a, b: a.max(),  # (crashed)
    "min": lambda a, b: a.min(),  # (crashed)
    "max_2d": lambda a, b: a[:6].reshape(2, 3).max(),  # (crashed)
    "topk": lambda a, b: a.topk(3).values,
    "topk_indices": lambda a, b: a.topk(3).indices,
    "topk_smallest": lambda a, b: a.topk(3, largest=False).values,
    "clamp": lambda a, b: a.clamp(3, 150),
    "clamp_negative": lambda a, b: a.clamp(-3, 150),  # (-3 is 253 in eager)
    "clamp_tensor": lambda a, b: a.clamp(b, None),
    "clamp_tensors": lambda a, b: torch.clamp(a, min=b, max=b + 1),
    "clamp_max_tensor": lambda a, b: a.clamp_max(b),
    "scatter_amax": lambda a, b: torch.zeros_like(a[:3]).scatter_reduce(
        0, (b % 3).long(), a, "amax"),
    "div": lambda a, b: a / 3,
    "div_tensor": lambda a, b: a / (b | 1),
    "reciprocal": lambda a, b: a.reciprocal(),
    "sum": lambda a, b: a.sum(),
    "sum_dim": lambda a, b: a[None].sum(1, keepdim=True),
    "sum_uint8": lambda a, b: a.sum(dtype=torch.uint8),
    "mean_float": lambda a, b: a.mean(dtype=torch.float32),
    "floor_divide_negative": lambda a, b: a // -3,  # (-3 is 253 in eager)
    "floor_divide_inplace": lambda a, b: a.clone().floor_divide_(-3),  # (fuzzer seed 802263)
    "remainder_negative": lambda a, b: a % -3,
    "pad": lambda a, b: torch.nn.functional.pad(a, (1, 1), value=200),  # (lm.jit raised)
    "to_int8": lambda a, b: a.to(torch.int8),
    "gt_wrapped": lambda a, b: a > 300,  # (raised)
    "eq_negative": lambda a, b: a == -56,
}


@pytest.mark.parametrize("name", OPS)
def test_jit_matches_eager(name):
    fn = OPS[name]
    got = lm.jit(fn).lower(X, Y).compile()(X, Y)
    want = fn(X, Y)
    assert got.dtype == want.dtype
    assert torch.equal(got, want), (got, want)


def test_lazy_device_matches_eager(counters):
    """All ops in one graph (one compile), none of them run eagerly."""
    outs = [fn(lazy(X), lazy(Y)) for fn in OPS.values()]
    lm.mark_step()
    for name, out, fn in zip(OPS, outs, OPS.values()):
        want = fn(X, Y)
        assert out.dtype == want.dtype and torch.equal(out.cpu(), want), name
    assert not counters.fell_back()


def test_torch_compile_matches_eager():
    def program(a, b):
        return [fn(a, b) for fn in OPS.values()]
    got = torch.compile(program, backend="lazy_mlir", fullgraph=True)(X, Y)
    for name, out, want in zip(OPS, got, program(X, Y)):
        assert out.dtype == want.dtype and torch.equal(out, want), name


@pytest.mark.parametrize("source,dtype", [(torch.uint8, torch.int8), (torch.int8, torch.uint8)])
def test_torch_compile_conversion_between_bytes_is_a_new_tensor(source, dtype):
    """ui8 and si8 are one i8 in the module: the conversion folds away and
    ``main`` returns its argument, which came back as the input itself (its
    dtype, its memory), at the first call and by the read plan after."""
    x = X.to(source)
    compiled = torch.compile(lambda a: a.to(dtype), backend="lazy_mlir", fullgraph=True)
    for _ in range(2):
        got = compiled(x)
        assert got.dtype == dtype and torch.equal(got, x.to(dtype))
        assert got.data_ptr() != x.data_ptr()
