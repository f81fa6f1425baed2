"""float64 functions IREE's CPU code calls from the C library compile
(``pipeline/libm_calls.py``): the embedded link failed (``undefined symbol:
sin``) and the graph ran eagerly."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import Counters, lazy
from lazy_mlir.pipeline.libm_calls import calls_libm


@pytest.mark.parametrize("fn", [
    torch.sin, torch.cos, torch.atan, torch.tanh, torch.log10,
    lambda t: torch.fmod(t, 0.7), lambda t: torch.remainder(t, -0.7),
    lambda t: torch.atan2(t, t.flip(0)),
])
def test_float64_libm_functions_compile(fn):
    x = torch.tensor([0.5, -1.25, 3.0, 1e-3, 7.5], dtype=torch.float64)
    c = Counters()
    got = fn(lazy(x))
    lm.mark_step()
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), fn(x), rtol=1e-15, atol=1e-300, equal_nan=True)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_only_float64_calls_link_with_the_system_linker():
    assert calls_libm("%2 = math.sin %in : f64\n")
    assert calls_libm("%3 = arith.remf %a, %b : f64\n")
    assert not calls_libm("%2 = math.sin %in : f32\n")
    assert not calls_libm("%2 = math.exp %in : f64\n")  # (IREE expands it)


def test_float64_libm_function_of_a_constant_compiles():
    """``sin`` of a tensor filled with a constant: IREE's constant
    evaluation compiled it as an embedded ELF of its own, whose link failed
    the same way (fuzzer seed 800088 under torch.compile, which keeps the
    fill in the graph), and the graph ran eagerly."""
    from e2e_helpers import compiled_like_eager

    def fn(v):
        v.fill_(3.0)
        return [v, torch.sin(v), torch.cos(v) * v]
    compiled_like_eager(fn, lambda: [torch.zeros(2, 3, dtype=torch.float64)])
