"""Capture-time decomposition: which ops are decomposed and which fall back
(``lazy/decompose.py``), and our capture decompositions against eager CPU.
Nothing here compiles."""
import math

import pytest
import torch
import torch.fx as fx

from lazy_mlir.ops import support
from lazy_mlir.ops.elementwise import angle, hypot
from lazy_mlir.ops.index import put
from lazy_mlir.lazy import decompose, state
from lazy_mlir.graph.ir import DeviceData, TensorSpec, Value

aten = torch.ops.aten


def value(*shape, dtype=torch.float32):
    return Value.of_data(DeviceData(TensorSpec.of(torch.empty(shape, dtype=dtype))))


def plan(func, *args, **kwargs):
    from lazy_mlir.graph import argtree
    flat, tree = argtree.flatten(args, kwargs)
    return decompose.plan(func, flat, tree)


def traced_ops(gm):
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def test_op_not_in_dialect_with_torch_decomposition_is_decomposed():
    assert not support.op_is_supported(aten.addmv.default)
    gm = plan(aten.addmv.default, value(3), value(3, 4), value(4))
    assert isinstance(gm, fx.GraphModule)
    assert aten.addmv.default not in traced_ops(gm)
    assert all(support.op_is_supported(op) for op in traced_ops(gm)
               if isinstance(op, torch._ops.OpOverload) and not op._schema.is_mutable)


def test_our_decomposition_comes_first():
    gm = plan(aten.angle.default, value(5))
    assert isinstance(gm, fx.GraphModule)
    assert aten.isnan.default in traced_ops(gm)


def test_decomposition_into_unsupported_ops_is_refused(monkeypatch):
    # torch._refs.digamma is prims.digamma: nothing the dialect has.
    import torch._refs
    monkeypatch.setattr(decompose, "capture_table",
                        lambda: {aten.digamma.default: torch._refs.digamma})
    monkeypatch.setattr(decompose, "_plans", {})
    why = plan(aten.digamma.default, value(5))
    assert isinstance(why, str) and "digamma" in why


def test_random_op_is_not_decomposed():
    # torch decomposes _fused_dropout into a rand_like draw and a compare: another random stream.
    assert plan(aten._fused_dropout.default, value(4), 0.5) == "random op"


def test_functional_fill_is_decomposed_into_eagers_own_fill():
    gm = plan(aten.geometric.default, value(4), 0.5)
    assert isinstance(gm, fx.GraphModule)
    assert aten.geometric_.default in traced_ops(gm)


def test_random_op_written_with_eagers_own_fills_is_decomposed():
    gm = plan(aten.normal.Tensor_Tensor, value(4), value(4))
    assert isinstance(gm, fx.GraphModule)
    assert aten.normal_.default in traced_ops(gm)


def test_op_without_decomposition():
    assert plan(aten.kthvalue.default, value(4), 2) == "no decomposition"


def test_supported_op_is_not_decomposed():
    assert plan(aten.mv.default, value(3, 4), value(4)) == "no decomposition"


@pytest.fixture
def deny():
    """``deny(name)``: stop compiling an op for this test only."""
    def _deny(name):
        if name not in support.DENIED:
            support.deny(name, "test: pretend it cannot be compiled")
    yield _deny
    state.reset()  # the ops denied here compile again


def test_denied_op_in_a_decomposition_is_decomposed_in_turn(deny):
    gm = plan(aten.addmv.default, value(2), value(2, 5), value(5))
    assert aten.mv.default in traced_ops(gm)
    deny("mv")  # a compile failure at run time denies an op: torch decomposes mv
    gm = plan(aten.addmv.default, value(2), value(2, 6), value(6))
    assert isinstance(gm, fx.GraphModule)
    assert aten.mv.default not in traced_ops(gm)
    assert aten.sum.dim_IntList in traced_ops(gm)


def test_denied_op_without_decomposition_refuses_it(deny):
    deny("mv")
    deny("sum.dim_IntList")
    why = plan(aten.addmv.default, value(2), value(2, 7), value(7))
    assert isinstance(why, str) and "sum" in why


def test_plans_are_memoized_per_signature():
    a = plan(aten.addmv.default, value(7), value(7, 2), value(2))
    assert plan(aten.addmv.default, value(7), value(7, 2), value(2)) is a
    assert plan(aten.addmv.default, value(8), value(8, 2), value(2)) is not a


def test_import_decomposition_that_reads_values(monkeypatch):
    """PyTorch's own take (indexing with the index tensor) reads a 0-d
    index's value: such an import decomposition is detected before use."""
    from torch._decomp import decomposition_table as torch_table
    from lazy_mlir.graph import argtree
    monkeypatch.setattr(support, "decomposition_table",
                        lambda: {aten.take.default: torch_table[aten.take.default]})
    monkeypatch.setattr(decompose, "_import_checks", {})
    flat, tree = argtree.flatten((value(3, 4), value(dtype=torch.int64)), {})
    assert decompose.import_decomposition_reads_values(aten.take.default, flat, tree)
    flat, tree = argtree.flatten((value(3, 4), value(2, dtype=torch.int64)), {})
    assert not decompose.import_decomposition_reads_values(aten.take.default, flat, tree)


def test_a_template_that_reads_values_when_imported(monkeypatch):
    """A backward's template is checked once for all its sizes
    (``reads_values_when_imported``): capture does not check its node."""
    from torch._decomp import decomposition_table as torch_table
    from torch.fx.experimental.proxy_tensor import make_fx
    monkeypatch.setattr(support, "decomposition_table",
                        lambda: {aten.take.default: torch_table[aten.take.default]})
    monkeypatch.setattr(support, "decomposed_before_import", lambda op: op is aten.take.default)
    x = torch.randn(3, 4)
    for index, reads in ((torch.tensor(2), True), (torch.tensor([2, 5]), False)):
        for sizes in ("fake", "symbolic"):
            gm = make_fx(lambda a, i: torch.take(a, i) * 2, tracing_mode=sizes)(x, index)
            assert decompose.reads_values_when_imported(gm) is reads, sizes


def test_angle_matches_eager():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, math.nan, -math.inf, math.inf])
    torch.testing.assert_close(angle(x), torch.angle(x), equal_nan=True)
    i = torch.tensor([-3, 0, 4])
    torch.testing.assert_close(angle(i), torch.angle(i))
    assert angle(torch.zeros(2, dtype=torch.complex64)) is NotImplemented


def test_hypot_matches_eager_at_the_edges():
    a = torch.tensor([3.0, 1e30, 1e-30, 0.0, math.inf, math.nan, math.nan, -5.0, 2e38])
    b = torch.tensor([4.0, 1e30, 1e-30, 0.0, math.nan, 1.0, math.inf, 0.0, 2e38])
    torch.testing.assert_close(hypot(a, b), torch.hypot(a, b), equal_nan=True)


@pytest.mark.parametrize("accumulate", [False, True])
def test_put_matches_eager(accumulate):
    x = torch.randn(3, 4)
    index = torch.tensor([[0, -1], [5, -12]])
    source = torch.randn(2, 2)
    torch.testing.assert_close(put(x, index, source, accumulate), x.put(index, source, accumulate))


@pytest.mark.parametrize("name", ["i0", "i0e", "i1", "i1e"])
def test_bessel_matches_eager(name):
    from lazy_mlir.ops import bessel
    eager = {"i0": torch.i0, "i0e": torch.special.i0e, "i1": torch.special.i1,
             "i1e": torch.special.i1e}[name]
    x = torch.cat([torch.tensor([0.0, 8.0, 8.0001, -8.0, 1e-30, 100.0, math.inf, -math.inf,
                                 math.nan]), torch.linspace(-30, 30, 601)])
    torch.testing.assert_close(getattr(bessel, name)(x), eager(x), rtol=2e-6, atol=0,
                               equal_nan=True)
    i = torch.arange(-4, 5)
    torch.testing.assert_close(getattr(bessel, name)(i), eager(i), rtol=2e-6, atol=0)
    assert getattr(bessel, name)(x.double()) is NotImplemented


@pytest.mark.parametrize("name", ["modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0",
                                  "modified_bessel_k1", "scaled_modified_bessel_k0",
                                  "scaled_modified_bessel_k1"])
def test_modified_bessel_matches_eager(name):
    from lazy_mlir.ops import bessel
    x = torch.cat([torch.tensor([0.0, -0.0, -1.0, 1e-30, 2.0, 2.0001, 8.0, 8.0001, -8.5, 100.0,
                                 math.inf, -math.inf, math.nan]), torch.linspace(-30, 30, 601)])
    torch.testing.assert_close(getattr(bessel, name)(x), getattr(torch.special, name)(x),
                               rtol=2e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
                                  "spherical_bessel_j0"])
def test_bessel_jy_matches_eager(name):
    # Absolute tolerance: relative error grows near the functions' zeros, in
    # eager as much as here (same float32 formulas).
    from lazy_mlir.ops import registry
    BESSEL_JY_DECOMPOSITIONS = registry.build_table(registry.CAPTURE)
    op = getattr(aten, "special_" + name).default
    x = torch.cat([torch.tensor([0.0, -0.0, 1e-6, 0.4999, 0.5, -0.5, 5.0, 5.0001, -5.0, 100.0,
                                 math.inf, -math.inf, math.nan]), torch.linspace(-30, 30, 601)])
    torch.testing.assert_close(BESSEL_JY_DECOMPOSITIONS[op](x), op(x), rtol=1e-5, atol=1e-6,
                               equal_nan=True)
