"""Ops the torch dialect lacks are compiled through decompositions at capture;
ops whose output shape depends on the data, or of complex dtype, fall back to
eager visibly (counted in lm.metrics) instead of raising."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from e2e_helpers import Counters, assert_lazy_close, lazy


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def test_torch_decompositions_compile():
    b, m, v = _rand(3, seed=1), _rand(3, 5, seed=2), _rand(5, seed=3)
    x = _rand(1, 2, 3, 4, 5, seed=4)
    c = Counters()
    out = torch.addmv(lazy(b), lazy(m), lazy(v), beta=0.5, alpha=2.0)
    up = F.interpolate(lazy(x), size=(4, 5, 7), mode="trilinear")
    assert_lazy_close(out, torch.addmv(b, m, v, beta=0.5, alpha=2.0), rtol=1e-5, atol=1e-5)
    assert_lazy_close(up, F.interpolate(x, size=(4, 5, 7), mode="trilinear"),
                      rtol=1e-5, atol=1e-5)
    assert c.delta("decomposed::addmv") == 1
    assert c.delta("decomposed::upsample_trilinear3d") == 1
    assert c.delta("aten::addmv") == 0 and c.delta("aten::upsample_trilinear3d") == 0


def test_our_decompositions_compile():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, math.nan, -math.inf])
    a = torch.tensor([3.0, 1e30, 0.0, math.inf, math.nan, -5.0])
    t, index, source = _rand(3, 4, seed=5), torch.tensor([0, -1, 5]), _rand(3, seed=6)
    c = Counters()
    angle = torch.angle(lazy(x))
    hypot = torch.hypot(lazy(a), lazy(x))
    put = lazy(t)
    put.put_(lazy(index), lazy(source), accumulate=True)
    assert_lazy_close(angle, torch.angle(x), equal_nan=True)
    assert_lazy_close(hypot, torch.hypot(a, x), equal_nan=True)
    assert_lazy_close(put, t.put(index, source, accumulate=True))
    for op in ("angle", "hypot", "put"):
        assert c.delta("decomposed::" + op) == 1, op
        assert c.delta("aten::" + op) == 0, op


def test_bessel_functions_compile():
    x = torch.cat([torch.tensor([0.0, 8.0, -8.5, 100.0, math.nan]), torch.linspace(-20, 20, 41)])
    c = Counters()
    fns = [torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e]
    outs = [f(lazy(x)) for f in fns]
    for f, out in zip(fns, outs):
        assert_lazy_close(out, f(x), rtol=2e-6, atol=0, equal_nan=True)
    for op in ("i0", "special_i0e", "special_i1", "special_i1e"):
        assert c.delta("decomposed::" + op) == 1 and c.delta("aten::" + op) == 0, op


def test_modified_bessel_k_functions_compile():
    x = torch.cat([torch.tensor([0.0, -1.0, 2.0, 2.5, math.nan]), torch.linspace(0.1, 20, 40)])
    c = Counters()
    fns = [torch.special.modified_bessel_k1, torch.special.scaled_modified_bessel_k0]
    outs = [f(lazy(x)) for f in fns]
    for f, out in zip(fns, outs):
        assert_lazy_close(out, f(x), rtol=2e-6, atol=0, equal_nan=True)
    for op in ("special_modified_bessel_k1", "special_scaled_modified_bessel_k0"):
        assert c.delta("decomposed::" + op) == 1 and c.delta("aten::" + op) == 0, op


def test_bessel_j_y_functions_compile():
    x = torch.cat([torch.tensor([0.0, -1.0, 5.0, 0.3, math.nan]), torch.linspace(0.1, 20, 40)])
    c = Counters()
    fns = [torch.special.bessel_j0, torch.special.bessel_y1]
    outs = [f(lazy(x)) for f in fns]
    for f, out in zip(fns, outs):
        assert_lazy_close(out, f(x), rtol=1e-5, atol=1e-6, equal_nan=True)
    for op in ("special_bessel_j0", "special_bessel_y1"):
        assert c.delta("decomposed::" + op) == 1 and c.delta("aten::" + op) == 0, op


def test_random_ops_draw_what_eager_draws():
    mean, std, x = _rand(5, 3, seed=10), _rand(3, seed=11).abs() + 0.1, _rand(4, 2, seed=12)
    c = Counters()
    torch.manual_seed(5)
    lazy_out = (torch.normal(lazy(mean), lazy(std)), torch.randint_like(lazy(x), -3, 9))
    torch.manual_seed(5)
    eager_out = (torch.normal(mean, std), torch.randint_like(x, -3, 9))
    assert_lazy_close(lazy_out[0], eager_out[0])
    assert_lazy_close(lazy_out[1], eager_out[1], rtol=0, atol=0)
    assert c.delta("decomposed::normal") == 1 and c.delta("decomposed::randint_like") == 1
    assert c.delta("aten::normal") == 0 and c.delta("aten::randint_like") == 0


def test_data_dependent_shapes_fall_back_visibly():
    x = _rand(4, 5, seed=7)
    c = Counters()
    nz = torch.nonzero(lazy(x) > 0)
    sel = torch.masked_select(lazy(x), lazy(x) > 0.5)
    assert torch.equal(nz.cpu(), torch.nonzero(x > 0))
    assert torch.equal(sel.cpu(), torch.masked_select(x, x > 0.5))
    assert c.delta("aten::nonzero") == 1
    assert c.delta("aten::masked_select") == 1


def test_an_op_its_meta_kernel_refuses_falls_back_visibly():
    """``repeat_interleave`` of tensor counts without ``output_size`` (a
    graph batch's node ids, ``arange(G).repeat_interleave(counts)``): its
    meta kernel raises ("cannot repeat_interleave a meta tensor") and the
    user's program died; eager's kernel runs it now, or raises eager's error."""
    counts, rows = torch.tensor([2, 0, 3]), _rand(3, 2, seed=8)
    c = Counters()
    ids = torch.arange(3).to("lazy").repeat_interleave(lazy(counts))
    assert torch.equal(ids.cpu(), torch.arange(3).repeat_interleave(counts))
    assert torch.equal(lazy(rows).repeat_interleave(lazy(counts), dim=0).cpu(),
                       rows.repeat_interleave(counts, dim=0))
    assert torch.equal(torch.repeat_interleave(lazy(counts)).cpu(), torch.repeat_interleave(counts))
    assert c.delta("aten::repeat_interleave") == 3
    with pytest.raises(RuntimeError, match="repeats must have the same size"):
        lazy(rows).repeat_interleave(lazy(counts[:2]), dim=0)


def test_take_of_a_0d_index_compiles():
    # PyTorch's take indexes with the 0-dim tensor itself (.item() at compile
    # time); ours (lowering_decompositions.take) gathers on the device.
    x, i = _rand(3, 4, seed=8), torch.tensor(7)
    c = Counters()
    assert_lazy_close(torch.take(lazy(x), lazy(i)), torch.take(x, i))
    assert_lazy_close(torch.take(lazy(x), lazy(torch.tensor([[-1, 0], [11, -12]]))),
                      torch.take(x, torch.tensor([[-1, 0], [11, -12]])))
    assert c.delta("aten::take") == 0 and c.delta("sync::_local_scalar_dense") == 0


def test_complex_result_falls_back():
    x = _rand(3, seed=9)
    c = Counters()
    z = lazy(x).cdouble()
    assert z.dtype == torch.complex128
    assert torch.equal(z.cpu(), x.cdouble())
    assert c.delta("aten::_to_copy") == 1
