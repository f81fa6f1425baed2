"""``lazy/state.py``: the tables capture keeps are the ones its modules use,
and ``reset()`` empties every one. Nothing here compiles."""
import subprocess
import sys

import torch

import lazy_mlir as lm
from lazy_mlir.graph import argtree, debug
from lazy_mlir.graph.ir import DeviceData, TensorSpec, Value
from lazy_mlir.lazy import bounds, capture, coverage, decompose, device, dispatch, \
    early_outputs, host_index, random, shapes, state, supported, sync
from lazy_mlir.lazy.capture import emit, value_of
from lazy_mlir.lazy.tensor import live_storages
from lazy_mlir.ops import support
from lazy_mlir.compile_service.memory_cache import memory_cache

aten = torch.ops.aten


def test_modules_use_the_tables_of_state():
    """Each module's table is state's own object (a module that rebinds one
    would escape reset)."""
    assert dispatch._plans is state.record_plans
    assert capture._emit_plans is state.emit_plans
    assert dispatch._view_plans is state.view_plans
    assert shapes._memo is state.shape_memo
    assert capture._scalar_data is state.scalar_tensors
    assert capture._empty_values is state.empty_values
    assert device._factory_values is state.factory_values
    assert dispatch._inplace_checked is state.inplace_checked
    assert dispatch.trace_seconds is state.trace_seconds is sync.trace_seconds
    assert sync.step_clock is state.step_clock
    assert capture._dry_run is dispatch._dry_run is sync._dry_run is coverage._active \
        is bounds._dry_run is state.dry_run
    assert bounds._pending is state.index_checks and host_index._passed is state.host_checks_passed
    assert bounds._state is state.bounds_mode
    assert decompose._plans is state.decompose_plans
    assert decompose._import_checks is state.import_checks
    assert supported._warned is state.fallback_warned
    assert random._seed_logs is state.seed_logs
    assert early_outputs.early_reads is state.early_reads
    assert early_outputs.split_plans is state.split_plans
    assert early_outputs.backward_cuts is state.backward_cuts
    assert early_outputs.cut_step is state.cut_step
    assert early_outputs.one_graph_depth is state.one_graph_depth


def _fill_every_table():
    x = torch.randn(4, 4).to("lazy")
    y = (x * 0.5).relu()  # record plans, a lifted scalar
    x.add_(y, alpha=2.5)  # an in-place check
    x[1:].mul_(3.0)  # view steps: emit plans
    idx = Value.of_data(DeviceData(TensorSpec.of(torch.empty(3, dtype=torch.int64))))
    bounds.guard(aten.index_select.default, (value_of(x), 0, idx), {}, emit)  # a pending check
    picked = x[torch.tensor([0, 1])]  # a CPU index that passed its check (kept while alive)
    torch.tensor([], device="lazy")  # a shared empty value
    torch.arange(3, device="lazy")  # a shared factory value
    flat, tree = argtree.flatten((value_of(x), value_of(x), value_of(x)), {})
    decompose.plan(aten.addmm.default, flat, tree)
    decompose.import_decomposition_reads_values(aten.addmm.default, flat, tree)
    decompose.capture_table()
    support.deny("erf", "test")
    support.deny_signature("erf", ("f32",), "test")
    supported.note_fallback("erf", "test")
    random.log_seeds()
    sync.set_target("cpu")
    memory_cache.put(("test",), object())
    debug._state["seen"].append(("key", [], []))
    state.bounds_mode["unchecked"] = 1
    state.early_reads["key"] = {0}
    state.split_plans["key"] = None
    state.backward_cuts.add("subgraph-key")
    state.cut_step[0] = True
    state.one_graph_depth[0] = 1
    state.step_clock[1] = 1.0
    return y, picked


def test_reset_empties_every_table():
    state.reset()
    denied = dict(support.DENIED)
    y, _picked = _fill_every_table()
    tables = [state.shape_memo, state.record_plans, state.emit_plans, state.view_plans,
              state.scalar_tensors, state.empty_values, state.factory_values,
              state.inplace_checked, state.index_checks, state.host_checks_passed, state.decompose_plans,
              state.import_checks, state.fallback_warned, state.seed_logs,
              support.DENIED_SIGNATURES, debug._state["seen"], state.early_reads,
              state.split_plans, state.backward_cuts]
    assert all(tables) and len(memory_cache) and list(live_storages)
    assert state.trace_seconds[0] > 0 and state.target[0] is not None
    assert support.DENIED != denied and state.decompose_table[1] is not None
    state.reset()
    assert not any(tables) and not len(memory_cache) and not list(live_storages)
    assert state.trace_seconds == [0.0] and state.dispatch_depth == [0]
    assert state.cut_step == [False] and state.one_graph_depth == [0]
    assert state.step_clock[1] == 0.0
    assert state.target == [None] and state.decompose_table == [None, None]
    assert state.bounds_mode == {"unchecked": 0, "outer": None, "in_graph": 0}
    assert support.DENIED == denied
    assert value_of(y).pending  # a live tensor keeps its (pending) value
    z = (y * 0.5).relu()  # capture starts over: plans are made again
    assert state.record_plans and list(live_storages) and value_of(z).pending
    state.reset()


def test_offsets_lifted_after_a_reset_in_the_middle_of_a_graph():
    """``reset()`` empties the kept offsets while this graph's count of them
    stands: an offset lifted after it gets an input of its own, not an
    IndexError (``offsets.lifted``)."""
    from lazy_mlir.lazy import offsets
    x = torch.arange(6.0, device="lazy")
    a, b = x[1:3], x[2:4]  # two lifted offsets, pending
    state.reset()
    c = x[1:3] + x[2:4]  # (as many again: the table is empty)
    assert all(len(state.lifted_ints[i]) == 1 for i in (1, 2))
    assert offsets.lifted(1) is not offsets.lifted(1)  # (one input each)
    torch.testing.assert_close(torch.cat([a, b, c]).cpu(), torch.tensor([1., 2, 2, 3, 3, 5]))
    state.reset()


def test_reset_refuses_inside_a_dry_run():
    def step(x):
        try:
            state.reset()
        except RuntimeError as e:
            raised.append(str(e))
        return x + 1
    raised = []
    lm.check_coverage(step, torch.randn(2))
    assert raised and "check_coverage" in raised[0]


def test_importing_any_lazy_module_installs_the_hooks():
    code = ("import lazy_mlir.lazy.tensor as t, lazy_mlir.lazy.dispatch as d, "
            "lazy_mlir.lazy.sync as s\n"
            "assert t._dispatch is d.dispatch and t._to_host is s.to_host")
    subprocess.run([sys.executable, "-c", code], check=True)
