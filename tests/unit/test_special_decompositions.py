"""The special-function decompositions (``ops/special.py``,
``special_gamma.py``) run eagerly on CPU tensors match eager
ATen over a grid with the special values (NaN, +-inf, +-0, poles, large
arguments) and on integer inputs; float64 is left to eager."""
from __future__ import annotations

import math

import pytest
import torch

from lazy_mlir.ops import special as err
from lazy_mlir.ops import special_gamma as gam

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, 1e-8, 0.5, 1.0, 2.0, 3.0, -1.0, -2.0,
           -3.0, -0.5, -1.5, -2.5, 1.5, 2.5, 7.5, 7.4999, 8.0, 10.0, 9.99, 50.0, 51.0, 5e7, 6e7,
           1e17, 1e30, 3e38, -1e30, -26.6, -26.8, -6.0, -6.2, 4.05e36, 4e36, 1e-3, -1e-3, 0.999,
           1.001, 1.999, 2.001, -8.478, 8.397, 26.0, 10.05, 10.1, -10.999994, -1.99988, -2e-13]


def _grid():
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.tensor(SPECIAL), torch.linspace(-30, 30, 3001),
                      torch.randn(1000, generator=g) * 5, torch.logspace(-20, 38, 200),
                      -torch.logspace(-20, 4, 200)])


CASES = {
    "erfc": (err.erfc, torch.erfc, 1.3e-4, 1e-5),
    "erfcx": (err.erfcx, torch.special.erfcx, 1.3e-4, 1e-5),
    "lgamma": (gam.lgamma, torch.lgamma, 1.3e-4, 2e-4),
    "digamma": (gam.digamma, torch.digamma, 1.3e-4, 1e-5),
    "polygamma_1": (lambda x: gam.polygamma(1, x), lambda x: torch.polygamma(1, x), 1e-2, 1e-4),
    "polygamma_2": (lambda x: gam.polygamma(2, x), lambda x: torch.polygamma(2, x), 1e-2, 1e-4),
    "polygamma_4": (lambda x: gam.polygamma(4, x), lambda x: torch.polygamma(4, x), 1e-2, 1e-4),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_unary_matches_eager(name):
    ours, eager, rtol, atol = CASES[name]
    x = _grid()
    if name == "polygamma_1":  # documented limit: sin(pi x) reduced exactly for |x| < 2^16
        x = x[~(x < -65536)]
    torch.testing.assert_close(ours(x), eager(x), rtol=rtol, atol=atol, equal_nan=True)
    i = torch.arange(-12, 13)
    torch.testing.assert_close(ours(i), eager(i), rtol=rtol, atol=atol, equal_nan=True)
    b = torch.tensor([True, False])
    torch.testing.assert_close(ours(b), eager(b), rtol=rtol, atol=atol, equal_nan=True)
    z = torch.tensor(-2.5)
    assert ours(z).shape == ()
    torch.testing.assert_close(ours(z), eager(z), rtol=rtol, atol=atol, equal_nan=True)
    assert ours(x.double()) is NotImplemented


def test_zero_signs_and_poles_exactly():
    x = torch.tensor([0.0, -0.0, -1.0, -4.0, math.inf, -math.inf, math.nan])
    for ours, eager in ((gam.digamma, torch.digamma), (gam.lgamma, torch.lgamma)):
        torch.testing.assert_close(ours(x), eager(x), rtol=0, atol=0, equal_nan=True)


def test_ndtri_matches_eager():
    g = torch.Generator().manual_seed(1)
    y = torch.cat([torch.rand(2000, generator=g), torch.logspace(-37, 0, 300),
                   torch.tensor([0.0, 1.0, -0.1, 1.1, math.nan, 1e-30, 1 - 1e-7, 0.5, 0.1353353,
                                 0.8646647])])
    torch.testing.assert_close(err.ndtri(y), torch.special.ndtri(y), rtol=1.3e-4, atol=1e-5,
                               equal_nan=True)


def test_zeta_matches_eager():
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.tensor([1.0, 0.5, 2.0, 3.0, 4.0, 5.0, math.nan, math.inf, 2.5, 30.0, 100.0,
                                 3.0, 3.0, 4.0]),
                   torch.rand(2000, generator=g) * 12 - 2, torch.randint(1, 10, (1000,), generator=g)])
    q = torch.cat([torch.tensor([1.0, 1.0, -2.0, -2.5, -8.48, 0.0, 1.0, 1.0, -1.5, 0.5, 0.5,
                                 -2e-13, -0.5, -1e4 - 0.5]),
                   torch.randn(2000, generator=g) * 5, torch.randn(1000, generator=g) * 5])
    torch.testing.assert_close(gam.zeta(x, q), torch.special.zeta(x, q), rtol=1.3e-4, atol=1e-5,
                               equal_nan=True)


def _floats():
    g = torch.Generator().manual_seed(3)
    wide = torch.randn(3000, generator=g) * torch.exp(torch.randn(3000, generator=g) * 20)
    powers = 2.0 ** torch.arange(-125, 128).float()
    return torch.cat([torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 0.5, -3.0, 3e38,
                                    1.2e-38, 0.75, 3.4028235e38, -1e-30, -2.0 ** -100]),
                      wide.float(), powers, -powers, torch.nextafter(powers, torch.tensor(0.0))])


def test_frexp_is_exact():
    x = _floats()
    m, e = err.frexp(x)
    m_eager, e_eager = torch.frexp(x)
    assert e.dtype == torch.int32 and torch.equal(e, e_eager)
    torch.testing.assert_close(m, m_eager, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(m), torch.signbit(m_eager))
    assert err.frexp(x.double()) is NotImplemented


@pytest.mark.parametrize("towards", ["flipped", "inf", "-inf", "0", "-0", "same", "nan"])
def test_nextafter_is_exact(towards):
    x = _floats()
    y = {"flipped": x.flip(0), "inf": torch.full_like(x, math.inf),
         "-inf": torch.full_like(x, -math.inf), "0": torch.zeros_like(x),
         "-0": -torch.zeros_like(x), "same": x.clone(), "nan": torch.full_like(x, math.nan)}[towards]
    ours, eager = err.nextafter(x, y), torch.nextafter(x, y)
    torch.testing.assert_close(ours, eager, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(ours) | ours.isnan(), torch.signbit(eager) | eager.isnan())
