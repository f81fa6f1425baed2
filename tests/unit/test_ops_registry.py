"""The decomposition registry (``ops/registry.py``): duplicate checks,
priorities and chains, the tables it builds (equal to the tables before it
existed), and ``explain_op`` with its command. No compiler needed."""
from __future__ import annotations

import functools
import json
import pathlib
import re

import pytest
import torch

from lazy_mlir.ops import registry, support
from lazy_mlir.ops.explain import (CAPTURE_DECOMPOSED, COMPILED, FALLS_BACK, IMPORT_DECOMPOSED,
                                   TARGET_REWRITTEN)

aten = torch.ops.aten
SNAPSHOT = pathlib.Path(__file__).parent / "data" / "ops_tables_4d6ceda.json"
# An op no module registers, so throwaway registrations cannot collide.
SPARE = aten.logaddexp2.default


@pytest.fixture
def scratch():
    """Registrations made in the test, removed after it."""
    made = []

    def register(fn, **kwargs):
        before = set(registry.registrations(SPARE, kwargs["scope"]))
        registry.register_decomposition(SPARE, **kwargs)(fn)
        made.extend(set(registry.registrations(SPARE, kwargs["scope"])) - before)
        return fn
    yield register
    for r in made:
        registry.remove(r)


def _one(x, y):
    return "one"


def _two(x, y):
    return "two"


def test_spare_op_is_unregistered():
    assert registry.registrations(SPARE) == []


def test_duplicate_registration_raises(scratch):
    scratch(_one, scope=registry.CAPTURE)
    with pytest.raises(ValueError, match="overrides=True"):
        scratch(_two, scope=registry.CAPTURE)
    assert registry.build_table(registry.CAPTURE)[SPARE] is _one


def test_same_op_in_another_scope_is_no_duplicate(scratch):
    scratch(_one, scope=registry.CAPTURE)
    scratch(_two, scope=registry.IMPORT)
    assert registry.build_table(registry.IMPORT)[SPARE] is _two


def test_override_needs_a_distinct_priority(scratch):
    scratch(_one, scope=registry.IMPORT)
    with pytest.raises(ValueError, match="priority"):
        scratch(_two, scope=registry.IMPORT, overrides=True)


@pytest.mark.parametrize("first,second,winner", [(5, -5, _one), (-5, 5, _two)])
def test_priority_decides_not_order(scratch, first, second, winner):
    scratch(_one, scope=registry.IMPORT, priority=first)
    scratch(_two, scope=registry.IMPORT, priority=second, overrides=True)
    assert registry.build_table(registry.IMPORT)[SPARE] is winner
    loser = _two if winner is _one else _one
    assert [r.fn for r in registry.shadowed() if r.op is SPARE] == [loser]


def test_chained_registration_wraps_the_one_below(scratch):
    def wrap(op, below):
        return lambda x, y: ("wrapped", op, below(x, y))
    scratch(_one, scope=registry.IMPORT)
    scratch(wrap, scope=registry.IMPORT, priority=10, overrides=True, chained=True)
    assert registry.build_table(registry.IMPORT)[SPARE](1, 2) == ("wrapped", SPARE, "one")


def test_unknown_scope_and_non_op_raise():
    with pytest.raises(ValueError, match="scope"):
        registry.register_decomposition(SPARE, scope="later")
    with pytest.raises(TypeError):
        registry.register_decomposition("aten.add", scope=registry.CAPTURE)(_one)


def test_reentry_guard_is_per_instance_and_per_thread():
    a, b = registry.ReentryGuard(), registry.ReentryGuard()
    with a:
        assert a.active and not b.active
    assert not a.active


def test_no_registration_is_shadowed():
    """A plain registration a higher one replaces is dead code."""
    assert [r.where for r in registry.shadowed()] == []


def _name(fn, depth=0) -> str:
    """As the snapshot was written: qualname, lazy_mlir closure cells in []."""
    if isinstance(fn, functools.partial):
        base = "partial(" + _name(fn.func, depth + 1) + ")"
    else:
        base = f"{fn.__module__}.{fn.__qualname__}"
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if callable(getattr(c, "cell_contents", None))] if depth < 3 else []
    inner = [_name(c, depth + 1) for c in cells if "lazy_mlir" in (c.__module__ or "")]
    name = base + ("[" + ",".join(inner) + "]" if inner else "")
    return re.sub(r"lazy_mlir\.ops\.[a-z_]+\.", "", name)


@pytest.mark.parametrize("scope,table", [("capture", support.capture_decompositions),
                                         ("import", support.decomposition_table)])
def test_tables_equal_the_tables_before_the_registry(scope, table):
    want = json.loads(SNAPSHOT.read_text())[scope]
    got = {str(op): _name(fn) for op, fn in table().items()}
    assert {op: got.get(op) for op in want} == want
    ours = {op for op, fn in table().items() if "lazy_mlir" in (fn.__module__ or "")}
    assert {str(op) for op in ours} <= set(want)


def test_built_tables_hold_exactly_the_registered_ops():
    for scope, table in ((registry.CAPTURE, support.capture_decompositions()),
                         (registry.IMPORT, support.decomposition_table())):
        built = registry.build_table(scope)
        assert built and all(table[op] is not None for op in built)
        assert {op for op in built} == {r.op for r in registry.registered(scope)}


def test_target_registrations_list_the_passes_tables():
    from lazy_mlir.passes import conv_matmul, pool_elementwise
    listed = {r.op for r in registry.registered(registry.TARGET)}
    assert listed == set(conv_matmul.decompositions()) | set(pool_elementwise.DECOMPOSITIONS)


# -- explain_op ----------------------------------------------------------------

def _explain(op, target="cpu"):
    from lazy_mlir.frontends.debug import explain_op
    return explain_op(op, target=target)


# (not add or sub: decomposed before import, lowering.add_bool, uint8_promotion)
@pytest.mark.parametrize("spelling", [aten.logical_and.default, "aten.logical_and.default",
                                      "logical_and.default"])
def test_explain_direct(spelling):
    e = _explain(spelling)
    assert (e.op, e.verdict, e.in_dialect, e.steps) == ("aten.logical_and.default", COMPILED, True, ())
    assert "compiled directly" in str(e)


def test_explain_packet_is_its_default_overload():
    assert _explain(aten.special_i0e).op == _explain("aten.special_i0e").op \
        == "aten.special_i0e.default"


def test_explain_capture_decomposed():
    e = _explain("aten.hypot")
    assert e.verdict == CAPTURE_DECOMPOSED and not e.in_dialect
    (stage, where), = e.steps
    assert stage == "at capture" and re.fullmatch(r"lazy_mlir/ops/elementwise\.py:\d+: hypot", where)


def test_explain_import_decomposed_with_chain():
    e = _explain("aten.index_put.default")
    assert e.verdict == IMPORT_DECOMPOSED
    (stage, where), = e.steps
    assert stage == "before import" and where.startswith("lazy_mlir/ops/index.py") \
        and "wrapping lazy_mlir/ops/elementwise.py" in where


def test_explain_convolution_is_rewritten_on_cpu_only():
    cpu, vulkan = _explain("aten.convolution.default"), _explain("aten.convolution", "vulkan")
    assert cpu.verdict == TARGET_REWRITTEN
    (stage, where), = cpu.steps
    assert stage == "target rewrite (cpu)"
    assert re.fullmatch(r"lazy_mlir/passes/conv_matmul\.py:\d+: convolution", where)
    assert vulkan.verdict == COMPILED and vulkan.steps == ()


def test_explain_denied_op_falls_back_with_the_reason():
    e = _explain("aten.kthvalue")
    assert e.verdict == FALLS_BACK and e.denied == support.DENIED["kthvalue"]
    assert "denied: torch-mlir lowers it to tm_tensor.topk" in str(e)


@pytest.mark.parametrize("op,why", [("aten.nonzero", "output shape depends on the data"),
                                    ("aten.masked_select", "output shape depends on the data"),
                                    ("aten.item", "a sync point")])
def test_explain_ops_that_always_run_on_the_host(op, why):
    """In the torch dialect, but every call runs eagerly: capture cannot
    give them a static shape, or they return a Python value."""
    e = _explain(op)
    assert e.in_dialect and e.verdict == FALLS_BACK
    assert why in str(e)


def test_explain_op_denied_at_run_time():
    assert _explain("aten.tanh").verdict == COMPILED
    support.deny("tanh", "test: pretend it failed to compile")
    try:
        e = _explain("aten.tanh")
        assert e.denied == "test: pretend it failed to compile"
        assert e.verdict in (FALLS_BACK, CAPTURE_DECOMPOSED)
    finally:
        support.DENIED.pop("tanh")


def test_explain_rejects_what_is_no_aten_op():
    with pytest.raises(ValueError, match="no overload"):
        _explain("aten.add.NoSuch")
    with pytest.raises(ValueError, match="not an aten op"):
        _explain("aten.no_such_op")


def test_cli_explain_op(capsys):
    from lazy_mlir.tools.cli import main
    assert main(["explain-op", "aten.convolution.default", "--target", "vulkan"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("aten.convolution.default on vulkan: compiled directly")
    assert main(["explain-op", "aten.no_such_op"]) == 2
    assert "not an aten op" in capsys.readouterr().err
