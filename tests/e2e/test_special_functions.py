"""Special functions compile through our decompositions
(``dialects/special_decompositions.py``, ``special_gamma_decompositions.py``)
and match eager, special values included. Denormal inputs are left out: the
compiled code flushes them to zero (every op, not only these)."""
from __future__ import annotations

import math

import pytest
import torch

from e2e_helpers import Counters, assert_lazy_close, lazy

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, 0.5, 1.0, 2.0, -1.0, -2.0, -2.5, 7.5,
           10.0, 50.0, 51.0, 5e7, 6e7, 3e38, -26.8, -6.2, 4.05e36, -10.999994, 1e-13, -2e-13]


def _x():
    return torch.cat([torch.tensor(SPECIAL), torch.linspace(-30, 30, 241)])


def test_error_functions_compile():
    x = _x()
    y = torch.cat([torch.linspace(0, 1, 41), torch.tensor([-0.1, 1.1, math.nan, 1e-30])])
    c = Counters()
    fns = [torch.erfc, torch.special.erfcx, torch.special.log_ndtr]
    outs = [f(lazy(x)) for f in fns] + [torch.special.ndtri(lazy(y))]
    for f, out in zip(fns, outs):
        assert_lazy_close(out, f(x), rtol=1.3e-4, atol=1e-5, equal_nan=True)
    assert_lazy_close(outs[-1], torch.special.ndtri(y), rtol=1.3e-4, atol=1e-5, equal_nan=True)
    assert c.delta("decomposed::special_ndtri") == 1
    for op in ("erfc", "special_erfcx", "special_log_ndtr", "special_ndtri"):
        assert c.delta("aten::" + op) == 0, op


def test_gamma_functions_compile():
    x = _x()
    c = Counters()
    fns = {torch.lgamma: 2e-4, torch.digamma: 1e-5,
           (lambda t: torch.polygamma(1, t)): 1e-4, (lambda t: torch.polygamma(3, t)): 1e-4}
    outs = [f(lazy(x)) for f in fns]
    for (f, atol), out in zip(fns.items(), outs):
        rtol = 1.3e-4 if atol < 1e-4 or f is torch.lgamma else 1e-2
        assert_lazy_close(out, f(x), rtol=rtol, atol=atol, equal_nan=True)
    assert c.delta("decomposed::digamma") == 1 and c.delta("decomposed::polygamma") == 2
    for op in ("lgamma", "digamma", "polygamma"):
        assert c.delta("aten::" + op) == 0, op


@pytest.mark.slow  # long on a 2-core host; run with --runslow
def test_zeta_mvlgamma_and_0d_int_inputs_compile():
    x = torch.tensor([1.0, 0.5, 2.0, 3.0, 4.0, 3.0, math.nan, 2.5, 5.0])
    q = torch.tensor([1.0, 1.0, -2.0, -2.5, -8.48, -2e-13, 1.0, 0.5, 3.0])
    m = torch.linspace(1.01, 20, 30)
    i = torch.arange(-4, 8)
    c = Counters()
    zeta = torch.special.zeta(lazy(x), lazy(q))
    mvl = torch.mvlgamma(lazy(m), 3)
    digamma_0d = torch.digamma(lazy(torch.tensor(-2.5)))  # iree-compile hung on 0-d digamma
    lgamma_int = torch.lgamma(lazy(i))
    assert_lazy_close(zeta, torch.special.zeta(x, q), rtol=1.3e-4, atol=1e-5, equal_nan=True)
    assert_lazy_close(mvl, torch.mvlgamma(m, 3), rtol=1.3e-4, atol=1e-5)
    assert_lazy_close(digamma_0d, torch.digamma(torch.tensor(-2.5)), rtol=1.3e-4, atol=1e-5)
    assert_lazy_close(lgamma_int, torch.lgamma(i), rtol=1.3e-4, atol=2e-4)
    for op in ("special_zeta", "mvlgamma", "digamma", "lgamma"):
        assert c.delta("aten::" + op) == 0, op


def test_frexp_and_nextafter_compile_bit_exact():
    powers = 2.0 ** torch.arange(-120, 128, 7).float()
    x = torch.cat([torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, 0.75, -3.0, 3e38,
                                 1.2e-38, -1e-30]), powers, -powers, torch.linspace(-50, 50, 41)])
    y = torch.cat([x[1:], x[:1]])
    c = Counters()
    m, e = torch.frexp(lazy(x))
    n = torch.nextafter(lazy(x), lazy(y))
    m_eager, e_eager = torch.frexp(x)
    assert_lazy_close(m, m_eager, rtol=0, atol=0, equal_nan=True)
    assert_lazy_close(e, e_eager, rtol=0, atol=0)
    assert_lazy_close(n, torch.nextafter(x, y), rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(m.cpu()), torch.signbit(m_eager))
    assert c.delta("decomposed::frexp") == 1 and c.delta("decomposed::nextafter") == 1
