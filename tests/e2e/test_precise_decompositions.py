"""tan and logcumsumexp, which IREE and torch-mlir lower inaccurately, are
captured as our decompositions and match eager where the lowering did not:
near tan's poles and for logcumsumexp of large values; ``torch.compile``'s
graphs, never captured, get the same decompositions before import."""
from __future__ import annotations

import math

import pytest
import torch

from e2e_helpers import lazy

NAN, INF = math.nan, math.inf


def test_tan_near_poles_and_special_values(counters):
    x = torch.cat([torch.linspace(-20, 20, 4001),
                   torch.tensor([1.5707, 1.5708, -1.5707963, 4.712388, 0.0, -0.0, 1e-5, -3e-5,
                                 1e-30, 100.0, 8000.0, NAN, INF, -INF])])
    actual = torch.tan(lazy(x)).cpu()
    torch.testing.assert_close(actual, torch.tan(x), equal_nan=True, rtol=1.3e-6, atol=1e-6)
    assert torch.equal(torch.signbit(actual[x == 0]), torch.signbit(x[x == 0]))  # tan(-0) = -0
    assert counters.delta("decomposed::tan") == 1 and counters.delta("aten::tan") == 0


def test_tan_of_integers_is_float():
    x = torch.arange(-6, 7)
    actual = torch.tan(lazy(x)).cpu()
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, torch.tan(x))


def test_tan_float64_falls_back(counters):
    x = torch.linspace(-3, 3, 11, dtype=torch.float64)
    torch.testing.assert_close(torch.tan(lazy(x)).cpu(), torch.tan(x))
    assert counters.delta("aten::tan") == 1


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_logcumsumexp_large_and_special_values(dim, counters):
    x = torch.randn(5, 7, 6, generator=torch.Generator().manual_seed(0)) * 60
    x[1, 2, 3] = NAN
    x[0, :, 1] = -INF
    x[2, 3, :] = INF
    x[3, 1, 1] = 200.0  # exp overflows float32: log(cumsum(exp(x))) would be inf
    torch.testing.assert_close(torch.logcumsumexp(lazy(x), dim).cpu(),
                               torch.logcumsumexp(x, dim), equal_nan=True)
    assert counters.delta("decomposed::logcumsumexp") == 1


@pytest.mark.parametrize("shape", [(), (0, 3), (1,)])
def test_logcumsumexp_degenerate_shapes(shape):
    x = torch.randn(shape)
    torch.testing.assert_close(torch.logcumsumexp(lazy(x), 0).cpu(), torch.logcumsumexp(x, 0))


@pytest.mark.parametrize("op", ["logcumsumexp", "tan"])
def test_torch_compile_graphs_get_the_precise_decompositions(op, counters):
    """Graphs that were never captured (Dynamo's) reach torch-mlir with the
    op itself: logcumsumexp of 100 gave inf there (log(cumsum(exp(x))))."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()
    torch._dynamo.reset()
    fn = {"logcumsumexp": lambda x: torch.logcumsumexp(x, 1) * 2,
          "tan": lambda x: torch.tan(x) * 2}[op]
    x = {"logcumsumexp": torch.tensor([[100.0, 1.0, 90.0, -3.0], [0.5, 200.0, -INF, 4.0]]),
         "tan": torch.tensor([1.5707, -1.5707963, 4.712388, 0.3, -0.0])}[op]
    compiled = torch.compile(fn, backend="lazy_mlir")
    for _ in range(2):  # (the first call may run eagerly while compiling)
        got = compiled(x)
    torch.testing.assert_close(got, fn(x), rtol=1.3e-6, atol=1e-6)
    assert counters.delta("DynamoEagerGraph") == 0


@pytest.mark.parametrize("op", [torch.sin, torch.cos], ids=["sin", "cos"])
def test_sin_cos_of_large_arguments(op):
    """IREE reduces by 2*pi in one float32 step: 2.8e-4 off at 1e4 (rotary
    embeddings of long sequences) and far outside [-1, 1] at 1e9 (fuzzer
    seed 900496). Cephes' reduction: eager's values to 1e7."""
    x = torch.cat([torch.linspace(-20, 20, 4001), torch.linspace(1e3, 1e4, 4001),
                   torch.linspace(-1e7, -5e6, 4001),
                   torch.tensor([0.0, -0.0, 1e-30, -3e-5, NAN, INF, -INF])])
    got = op(lazy(x)).cpu()
    torch.testing.assert_close(got, op(x), rtol=0, atol=2e-7, equal_nan=True)
    assert torch.equal(torch.signbit(got[x == 0]), torch.signbit(op(x)[x == 0]))  # sin(-0) = -0
    far = torch.tensor([1e9, -3e12, 1e30, 1067450368.0])
    assert op(lazy(far)).cpu().abs().max() <= 1  # (not eager's value past 2**26: README)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int32, torch.float64])
def test_sin_cos_of_other_dtypes(dtype, counters):
    x = torch.arange(-60, 60, 7).to(dtype)
    for op in (torch.sin, torch.cos):
        got = op(lazy(x)).cpu()
        assert got.dtype == op(x).dtype
        torch.testing.assert_close(got, op(x))
    assert counters.delta("EagerGraph") == 0 and not counters.fell_back()


def test_sin_cos_backward_and_every_way_in():
    x0 = torch.linspace(-5e3, 5e3, 101)
    x = lazy(x0).requires_grad_()
    (torch.sin(x) * torch.cos(x)).sum().backward()
    e = x0.clone().requires_grad_()
    (torch.sin(e) * torch.cos(e)).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), e.grad, rtol=0, atol=5e-7)
    import lazy_mlir as lm
    fn = lm.jit(lambda a: torch.sin(a) + torch.cos(a)).lower(x0).compile()
    torch.testing.assert_close(torch.as_tensor(fn(x0)), torch.sin(x0) + torch.cos(x0),
                               rtol=0, atol=3e-7)
