"""Size families (pipeline/size_family.py): the plan of two graphs that differ
only in sizes, its guard, and the symbolic re-trace of a module."""
import dataclasses

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.pipeline.size_family import (Expr, SizeSpecialized, derive_plan,
                                            exact_floor_divisions, family_of, symbolic_module)


def _step(x, w, ids):
    b, t = x.shape[0], x.shape[1]
    h = torch.ops.aten.view.default(x, [b * t, 16]) @ w
    h = h.view(b, t, 16).softmax(-1)
    positions = torch.arange(t).view(1, t).expand(b, t)
    loss = torch.nn.functional.cross_entropy(h.view(b * t, 16), ids.view(-1))
    return loss, h[:, :t - 1].sum(1), positions + ids


def _graph(b, t, f=_step):
    return make_fx(f, tracing_mode="fake")(torch.randn(b, t, 16), torch.randn(16, 16),
                                           torch.randint(0, 16, (b, t)))


def test_one_family_over_sizes_and_a_plan_that_admits_every_size():
    (k1, s1), (k2, s2), (k3, s3) = (family_of(_graph(*bt)) for bt in ((4, 6), (3, 11), (5, 9)))
    assert k1 == k2 == k3
    plan = derive_plan(s1, s2)
    assert plan.dims == ((0, 1, None), (None, None), (0, 1))
    exprs = dict(plan.exprs)
    assert Expr((0, 1)) in exprs.values()  # the view to [b * t, 16]
    assert Expr((1,), add=-1) in exprs.values()  # the slice to t - 1
    assert plan.admits(s3) and plan.admits(s1)


def test_plan_refuses_what_its_module_would_not_compute():
    _, s1 = family_of(_graph(4, 6))
    _, s2 = family_of(_graph(3, 11))
    plan = derive_plan(s1, s2)
    _, ones = family_of(_graph(1, 6))  # a size of 1 broadcasts: never dynamic
    assert not plan.admits(ones)

    ints32 = make_fx(_step, tracing_mode="fake")(torch.randn(4, 6, 16), torch.randn(16, 16),
                                                  torch.randint(0, 16, (4, 6), dtype=torch.int32))
    assert family_of(ints32)[0] != family_of(_graph(4, 6))[0]  # a dtype: another family


def _modulo_graph(n):
    return family_of(make_fx(lambda x: x * 2 + torch.ops.aten.arange.default(n % 5 + 1).sum(),
                             tracing_mode="fake")(torch.randn(n)))


def test_an_integer_explained_by_coincidence_is_guarded():
    (k1, s1), (k2, s2) = _modulo_graph(6), _modulo_graph(9)
    assert k1 == k2
    plan = derive_plan(s1, s2)  # 6 % 5 + 1 = 6 - 4 and 9 % 5 + 1 = 9 - 4: n - 4 it says
    assert dict(plan.exprs)[1] == Expr((0,), add=-4)
    assert plan.admits(_modulo_graph(8)[1])  # (8 % 5 + 1 = 8 - 4: the module is right)
    assert not plan.admits(_modulo_graph(12)[1])  # (12 % 5 + 1 = 3, not 8)


def test_a_negated_size_is_explained():
    # (an index clamped into [-n, n): EmbeddingBag's max bags made no plan)
    def graph(n):
        return family_of(make_fx(lambda x, i: x[torch.clamp(i, -n, n - 1)],
                                 tracing_mode="fake")(torch.randn(n), torch.zeros(3, dtype=torch.long)))
    (k1, s1), (k2, s2) = graph(10), graph(13)
    assert k1 == k2
    plan = derive_plan(s1, s2)
    assert Expr((0,), k=-1) in dict(plan.exprs).values()
    assert Expr((0,), add=-1) in dict(plan.exprs).values()
    assert plan.admits(graph(7)[1])


def test_an_integer_no_expression_explains_makes_no_plan():
    assert derive_plan(_modulo_graph(6)[1], _modulo_graph(12)[1]) is None  # 2, 3 for 6, 12


def test_symbolic_module_has_symbolic_sizes_and_same_values():
    _, s1 = family_of(_graph(4, 6))
    gm = _graph(3, 11)
    _, s2 = family_of(gm)
    plan = derive_plan(s1, s2)
    traced = symbolic_module(gm, plan)
    assert traced.meta["size_guards"] == ("Ne(d1 - 1, 1)",)  # (slice's: t - 1 is not 1)
    plan = dataclasses.replace(plan, guards=traced.meta["size_guards"])
    assert plan.admits(family_of(_graph(3, 7))[1]) and not plan.admits(family_of(_graph(3, 2))[1])
    x = [n.meta["val"] for n in traced.graph.nodes if n.op == "placeholder"][0]
    assert all(isinstance(s, torch.SymInt) for s in x.shape[:2]) and x.shape[2] == 16
    args = (torch.randn(5, 7, 16), torch.randn(16, 16), torch.randint(0, 16, (5, 7)))
    for got, want in zip(traced(*args), _step(*args)):
        torch.testing.assert_close(got, want)


def _larger(x):
    return x * 2 if x.shape[0] > 5 else x * 3  # (a shape function that tests a size)


def _exactly(x):
    return x * 2 if x.shape[0] == 7 else x * 3


def _called(fn, n):
    import torch.fx as fx
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(fn, (x,)),))
    x.meta["val"] = make_fx(lambda t: t, tracing_mode="fake")(torch.randn(n, 3)).graph \
        .find_nodes(op="placeholder")[0].meta["val"]
    return fx.GraphModule(torch.nn.Module(), graph)


def test_what_a_trace_assumes_becomes_the_plans_guard():
    plan = derive_plan(family_of(_called(_larger, 7))[1], family_of(_called(_larger, 9))[1])
    guards = symbolic_module(_called(_larger, 9), plan).meta["size_guards"]
    assert guards == ("d0 > 5",)
    plan = dataclasses.replace(plan, guards=guards)
    assert plan.admits(family_of(_called(_larger, 6))[1])
    assert not plan.admits(family_of(_called(_larger, 4))[1])


def test_a_shape_function_that_specializes_refuses_the_plan():
    plan = derive_plan(family_of(_called(_exactly, 4))[1], family_of(_called(_exactly, 7))[1])
    with pytest.raises(SizeSpecialized):
        symbolic_module(_called(_exactly, 7), plan)


def test_padding_a_dynamic_dimension_stays_symbolic():
    def f(x):
        return torch.ops.aten.constant_pad_nd.default(x, [0, 1, -1, 0], -100.0)
    gms = [make_fx(f, tracing_mode="fake")(torch.randn(n, 4)) for n in (5, 8)]
    traced = symbolic_module(gms[1], derive_plan(family_of(gms[0])[1], family_of(gms[1])[1]))
    x = torch.randn(11, 4)
    torch.testing.assert_close(traced(x)[0] if isinstance(traced(x), tuple) else traced(x), f(x))


def test_classes_of_equal_sizes_stay_distinct_symbols():
    """Two classes whose sizes happen to be equal when the module is traced
    (4x5 then 6x6) stay two symbols: ShapeEnv's duck sizing would make them
    one, and the module then computed a 7x7 result for a 7x5 input."""
    def f(x):
        return x * 3
    gms = [make_fx(f, tracing_mode="fake")(torch.randn(*s)) for s in ((4, 5), (6, 6))]
    plan = derive_plan(family_of(gms[0])[1], family_of(gms[1])[1])
    assert plan.dims == ((0, 1),)
    traced = symbolic_module(gms[1], plan)
    out = traced(torch.ones(7, 5))
    assert (out[0] if isinstance(out, (tuple, list)) else out).shape == (7, 5)
    x = [n.meta["val"] for n in traced.graph.nodes if n.op == "placeholder"][0]
    assert len({str(s) for s in x.shape}) == 2


def test_a_class_the_trace_ties_to_another_is_guarded():
    """Targets of length 3 * (t - 1) beside inputs of length t: two classes
    the trace finds related; the relation joins the guard."""
    def f(x, y):
        return x[:, 1:].reshape(-1) + y
    gms = [make_fx(f, tracing_mode="fake")(torch.randn(3, t), torch.randn(3 * (t - 1)))
           for t in (5, 8)]
    plan = derive_plan(family_of(gms[0])[1], family_of(gms[1])[1])
    guards = symbolic_module(gms[1], plan).meta["size_guards"]
    plan = dataclasses.replace(plan, guards=guards)
    ok = make_fx(f, tracing_mode="fake")(torch.randn(3, 11), torch.randn(30))
    assert plan.admits(family_of(ok)[1])
    _, sizes = family_of(ok)
    broken = dataclasses.replace(sizes, shapes=(sizes.shapes[0], (29,)))
    assert not plan.admits(broken)


def test_a_result_of_another_shape_raises_never_binds():
    from types import SimpleNamespace

    from lazy_mlir.graph.ir import DeviceData, TensorSpec
    from lazy_mlir.lazy.sync import _check_shapes
    out = DeviceData(TensorSpec((7, 5), (5, 1), 0, torch.float32))
    _check_shapes([SimpleNamespace(shape=[7, 5])], [out])
    with pytest.raises(RuntimeError, match="returned shape"):
        _check_shapes([SimpleNamespace(shape=[7, 7])], [out])


def test_a_decomposition_that_fixes_a_size_is_caught():
    """A pass after the symbolic trace (the pipeline's decompositions) that
    turns a symbolic size into a number would leave a module of one size:
    ``still_symbolic`` refuses it (the cpu target's convolutions as matmuls
    did, for LeNet's batch)."""
    from lazy_mlir.pipeline.fx_graph import decompose
    from lazy_mlir.pipeline.size_family import still_symbolic
    def f(x):
        return x * 2
    gms = [make_fx(f, tracing_mode="fake")(torch.randn(n, 4)) for n in (5, 8)]
    traced = symbolic_module(gms[1], derive_plan(family_of(gms[0])[1], family_of(gms[1])[1]))
    still_symbolic(decompose(traced))  # (the base table keeps it symbolic)

    def fixing(x, other):  # (x * 2, its size made a number: int())
        y = x[:int(x.shape[0])]
        return torch.ops.aten.add.Tensor(y, y)
    fixed = decompose(traced, {torch.ops.aten.mul.Tensor: fixing}, base=False)
    with pytest.raises(SizeSpecialized, match="fixes"):
        still_symbolic(fixed)


def test_a_product_is_preferred_to_a_line_through_the_same_two_points():
    """Two sizes fit many lines: ``t * t`` is also ``40 * t - 384`` at t =
    16, 24 (GPT-2's attention mask; the line made the module's view read
    ``numel // t``), ``b * t`` also ``12 * b - 12`` at (2, 6), (3, 8)."""
    from lazy_mlir.pipeline.size_family import explain
    assert explain(256, 576, [(16, 24)]) == Expr((0, 0))
    assert explain(12, 24, [(2, 3), (6, 8)]) == Expr((0, 1))
    assert explain(15, 23, [(16, 24)]) == Expr((0,), add=-1)  # (t - 1 stays)


def _split_square(y):
    n = y.shape[0]
    flat = torch.ops.aten.view.default((y @ y.T).repeat(4, 1), [4 * n * n]) * 3
    return torch.ops.aten.view.default(flat, [2, 2, n, n]).softmax(-1)


def test_an_exact_floor_division_of_sizes_is_divided_out():
    """A view that splits ``[4 * n**2]`` into ``[2, 2, n, n]`` traces its last
    size as ``(n**2)//n`` (torch's sympy misses the common factor), which
    FxImporter cannot import; the exact quotient replaces it in every
    value's metadata, sizes and strides, and the module then imports."""
    from torch.utils._sympy.functions import FloorDiv
    from lazy_mlir.dialects.torch_import import import_fx
    gm = make_fx(_split_square, tracing_mode="fake")(torch.randn(6, 4))
    plan = derive_plan(family_of(make_fx(_split_square, tracing_mode="fake")(
        torch.randn(4, 4)))[1], family_of(gm)[1])
    traced = symbolic_module(gm, plan)

    def divisions():
        vals = [n.meta["val"] for n in traced.graph.nodes
                if isinstance(n.meta.get("val"), torch.Tensor)]
        return [s for v in vals for s in (*v.shape, *v.stride())
                if isinstance(s, torch.SymInt) and s.node.expr.has(FloorDiv)]
    assert divisions()
    assert exact_floor_divisions(traced) == 2  # (the view and the softmax)
    assert not divisions()
    assert "[2,2,?,?]" in str(import_fx(traced))
    y = torch.randn(5, 4)
    torch.testing.assert_close(traced(y), _split_square(y))


def test_an_inexact_floor_division_stays():
    """``(n**2 + 1)//n`` is no polynomial of ``n``: nothing is rewritten."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv
    from lazy_mlir.pipeline.size_family import _exact_quotients
    n = sympy.Symbol("s0", integer=True, positive=True)
    assert _exact_quotients(FloorDiv(n ** 2 + 1, n)) == FloorDiv(n ** 2 + 1, n)
    assert _exact_quotients(FloorDiv(n ** 2 + n, 2 * n)) == FloorDiv(n ** 2 + n, 2 * n)
    assert _exact_quotients(FloorDiv(6 * n ** 2 + 3 * n, 3 * n)) == 2 * n + 1
