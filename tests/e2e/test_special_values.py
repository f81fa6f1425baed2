"""Ops whose compiled kernels mishandle special values, bool inputs or integer
rounding give eager PyTorch's answers: same NaN/inf positions, same signs
(also of zeros), values close. Each case compares the lazy device with eager on the CPU."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from e2e_helpers import lazy

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, math.inf, -math.inf, math.nan,
           1 / 3, -2.5, 1e30, -1e-30]
_XS, _YS = zip(*itertools.product(SPECIAL, SPECIAL))
X, Y = torch.tensor(_XS), torch.tensor(_YS)


def assert_same_special(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal NaN masks and sign bits, values close elsewhere."""
    actual = actual.cpu()
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.isnan(), expected.isnan())
    ok = ~expected.isnan()
    assert torch.equal(actual[ok].signbit(), expected[ok].signbit()), (actual, expected)
    torch.testing.assert_close(actual[ok], expected[ok], rtol=1e-5, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pow_tensor_tensor_special_values(dtype):
    x, y = X.to(dtype), Y.to(dtype)
    assert_same_special(torch.pow(lazy(x), lazy(y)), torch.pow(x, y))


@pytest.mark.parametrize("exponent", [-1, -2.0, 1 / 3, 0.5, -0.5, math.inf])
def test_pow_tensor_scalar_special_values(exponent):
    x = torch.tensor(SPECIAL)
    assert_same_special(torch.pow(lazy(x), exponent), torch.pow(x, exponent))


@pytest.mark.parametrize("base", [0.0, -2.0, 1.0, 0.9, 2.0, 1e-30])
def test_pow_scalar_base_special_values(base):
    y = torch.tensor(SPECIAL)
    assert_same_special(torch.pow(base, lazy(y)), torch.pow(base, y))


def test_atan2_special_values():
    assert_same_special(torch.atan2(lazy(X), lazy(Y)), torch.atan2(X, Y))


def test_atan2_of_bool_inputs():
    x, y = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    assert_same_special(torch.atan2(lazy(x), lazy(y)), torch.atan2(x, y))


def _bools(n, seed):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) > 0.5


def test_sort_of_bool_is_ascending_and_stable():
    x = _bools(40, 0)
    values, indices = torch.sort(lazy(x))
    expected = torch.sort(x, stable=True)
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)
    values, indices = torch.sort(lazy(x), descending=True)
    expected = torch.sort(x, descending=True, stable=True)
    assert torch.equal(values.cpu(), expected.values)
    assert torch.equal(indices.cpu(), expected.indices)


def test_clamp_of_bool():
    x, bound = _bools(8, 1), _bools(8, 2)
    assert torch.equal(torch.clamp_min(lazy(x), lazy(bound)).cpu(), torch.clamp_min(x, bound))
    assert torch.equal(torch.clamp_max(lazy(x), lazy(bound)).cpu(), torch.clamp_max(x, bound))


def test_scatters_of_bool_accumulate_as_logical_or():
    src = _bools(40, 3)
    index = torch.randint(0, 10, (40,), generator=torch.Generator().manual_seed(4))
    base = _bools(10, 5)
    cases = [
        lambda b, i, s: b.scatter_add(0, i, s),
        lambda b, i, s: b.scatter_reduce(0, i, s, "sum"),
        lambda b, i, s: b.scatter_reduce(0, i, s, "amax"),
        lambda b, i, s: b.scatter_reduce(0, i, s, "amin"),
        lambda b, i, s: b.index_add(0, i, s),
        lambda b, i, s: b.index_put((i,), s, accumulate=True),
    ]
    for f in cases:
        assert torch.equal(f(lazy(base), lazy(index), lazy(src)).cpu(), f(base, index, src))


def test_integer_scatter_reduce_mean_rounds_down():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(-9, 9, (10, 5), generator=g)
    src = torch.randint(-9, 9, (5, 5), generator=g)
    index = torch.randint(0, 10, (5, 5), generator=g)
    for include_self in (True, False):
        got = lazy(x).scatter_reduce(0, lazy(index), lazy(src), "mean", include_self=include_self)
        assert torch.equal(got.cpu(), x.scatter_reduce(0, index, src, "mean",
                                                       include_self=include_self))


def test_logcumsumexp_of_large_values():
    x = torch.tensor([[-1e4, 1e4], [100.0, -100.0], [1e4, 0.0]])
    assert_same_special(torch.logcumsumexp(lazy(x), 0), torch.logcumsumexp(x, 0))


def test_gelu_tanh_approximation_matches_eager():
    x = torch.linspace(-10, 10, 2001)
    got = torch.nn.functional.gelu(lazy(x), approximate="tanh")
    torch.testing.assert_close(got.cpu(), torch.nn.functional.gelu(x, approximate="tanh"))


def test_tan_near_its_poles():
    x = torch.linspace(-1.5707, 1.5707, 2001)
    torch.testing.assert_close(torch.tan(lazy(x)).cpu(), torch.tan(x))


def test_comparison_of_a_constant_float_tensor_with_an_int():
    x = torch.randn(4)
    for f in (lambda t: torch.full_like(t, 0.3) > 0, lambda t: torch.full_like(t, 0.3) < 1,
              lambda t: torch.full_like(t, 0.3) != 0, lambda t: torch.full_like(t, 0.3) == 0):
        assert torch.equal(f(lazy(x)).cpu(), f(x))
