"""A number that changes every step in a float activation's or fill's
arguments (leaky_relu's slope, hardtanh's bounds, threshold's threshold and
value, nan_to_num's fills, index_fill's and scatter's value) is a graph
input (``lazy/scalars.py``), with eager's values bit for bit: each new
number compiled a new graph."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import compiles_once_over_numbers, lazy

_IDX = [1, 3]


@pytest.mark.parametrize("fn", [
    lambda x, t: F.leaky_relu(x, t),
    lambda x, t: F.hardtanh(x, -t, t),
    lambda x, t: torch.threshold(x, t - 0.5, t),
    lambda x, t: torch.nan_to_num(x / 0, posinf=t),
    # (log only where it gives NaN or -inf: its finite values may differ from
    # eager's by an ulp, which the exact comparison below failed on unseeded inputs)
    lambda x, t: torch.nan_to_num(torch.where(x > 0, x, x.log()), nan=t, neginf=-t),
    lambda x, t: x.index_fill(0, torch.tensor(_IDX, device=x.device), t),
    lambda x, t: x.scatter(0, torch.tensor(_IDX, device=x.device), t),
], ids=["leaky_relu", "hardtanh", "threshold", "nan_to_num_inf", "nan_to_num_nan",
        "index_fill", "scatter"])
def test_a_new_number_each_step_compiles_once(fn):
    x = torch.randn(6, generator=torch.Generator().manual_seed(6))
    x[0] = 0.0
    compiles_once_over_numbers(fn, x, exact=True)


def test_default_fills_of_nan_to_num_are_the_dtypes_extremes():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 2.0], dtype=torch.bfloat16)
    got = torch.nan_to_num(lazy(x), nan=0.5).cpu()
    torch.testing.assert_close(got, torch.nan_to_num(x, nan=0.5), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_leaky_relu_of_half_floats_scales_in_float32_as_eager(dtype):
    # eager multiplies by the unrounded slope in float32 and rounds once
    x = torch.randn(257).to(dtype)
    got = F.leaky_relu(lazy(x), 0.3337).cpu()
    torch.testing.assert_close(got, F.leaky_relu(x, 0.3337), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_floats_times_a_number_multiply_in_float32_as_eager(dtype):
    """eager multiplies (divides) a float16 or bfloat16 tensor by a number
    taken in float32 and rounds once; lifted in the tensor's dtype, 1.7 was
    1.703125 first (an SGD momentum buffer's ``mul_(0.9)`` drifted each step)."""
    x = (torch.randn(1024, generator=torch.Generator().manual_seed(3)) * 3).to(dtype)
    fns = [lambda t: t * 1.7, lambda t: t / 1.7, lambda t: 1.7 * t, lambda t: t.clone().mul_(0.9),
           lambda t: t.clone().div_(3.3), lambda t: t * 1001, lambda t: t[0] * 1.7]
    got = [f(lazy(x)) for f in fns]
    for f, g in zip(fns, got):
        want = f(x)
        torch.testing.assert_close(g.cpu(), want, rtol=0, atol=0)
        assert g.dtype == want.dtype


@pytest.mark.parametrize("fn", [
    lambda x, t: F.elu(x, alpha=t),
    lambda x, t: torch.ops.aten.elu(x, t, 1.0507, 1.3),
    lambda x, t: F.softplus(x, beta=t),
    lambda x, t: F.softplus(x, beta=2.0, threshold=t * 10),
], ids=["elu", "elu_scaled", "softplus_beta", "softplus_threshold"])
def test_elu_and_softplus_numbers_compile_once(fn):
    # (float32 is within an ulp of eager, as before: exp/log1p are not libm's)
    compiles_once_over_numbers(fn, torch.randn(64) * 3)


def test_elu_of_bfloat16_computes_in_float32_as_eager():
    # eager's bfloat16 elu rounds once, from float32: the op's own lowering
    # rounded each step to bfloat16 (off by up to 1/16 at 0.3337)
    x = (torch.randn(1000) * 3).bfloat16()
    got = torch.ops.aten.elu(lazy(x), 0.3337, 1.0507, 1.3).cpu()
    torch.testing.assert_close(got, torch.ops.aten.elu(x, 0.3337, 1.0507, 1.3), rtol=0, atol=0)
