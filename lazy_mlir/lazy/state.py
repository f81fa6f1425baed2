"""Every piece of process-wide mutable state capture keeps, in one place.

The tables are defined here and imported by name where they are used (a
module global read costs the same as before, and nothing on the hot path
goes through this module's attributes). They are only ever changed in
place, never rebound, so ``reset()`` reaches every user.

Not listed: memos of static facts about an op, which no run can make wrong
(``func._lazy_mlir`` from ``capture.op_info``, ``func._lazy_mlir_self_update``,
the ``functools.lru_cache`` tables of ``kinds``, ``foreach.plan``,
``scalars`` and ``bounds._schemas``), and ``module_ties._inside``, a
thread-local guard that is set only while one ``Module.to`` call runs.
"""
from __future__ import annotations

import time

from ..graph import debug
from ..ops import support
from ..compile_service.memory_cache import memory_cache
from ..compile_service import size_families
from . import gc_hold
from .tensor import live_storages

# -- capture (shapes.py, capture.py, dispatch.py)
shape_memo: dict = {}       # shapes.infer: (op, tree, specs, constants) -> output specs
record_plans: dict = {}     # record: what an op's checks decided, by (op, specs, constants)
emit_plans: dict = {}       # emit: the same for ops capture records itself (views, scatters)
view_plans: dict = {}       # dispatch._view: (op, base spec, constants) -> capture.ViewPlan
scalar_tensors: dict = {}   # (value, type, dtype) -> the 0-dim lazy tensor of a lifted scalar
lifted_ints: dict = {}      # int -> the 0-dim int64 Values of a lifted view offset (offsets.py)
roll_shifts: dict = {}      # offsets._varied: (n-th roll of a graph, site) -> shifts, None once varied
empty_values: dict = {}     # (shape, dtype) -> the shared Value of an empty tensor (capture.empty_value)
factory_values: dict = {}   # (factory, its constant arguments) -> its shared Value (device.py)
list_replays: dict = {}     # (id(op), id(first tensor)) -> list_replay.Replay (a list op's record)
inplace_checked: set = set()  # in-place calls whose shape/dtype check passed
trace_seconds = [0.0]       # capture time since the last mark_step (TraceTime)
step_clock = [time.perf_counter(), 0.0]  # sync: the last mark_step's end, seconds since waited for graphs
graph_epoch = [0]           # sync: advances at each launch of pending values (offsets' per-graph counts)
dispatch_depth = [0]        # dispatch calls under way (a sync inside one is not capture time)

# -- lm.check_coverage (coverage.py): the dry run in progress, or None. One
# per process: backward runs on other threads.
dry_run: list = [None]

# -- sync.py: the target graphs compile for (None: the default, chosen on first use)
target: list = [None]

# -- bounds.py, host_index.py
index_checks: list = []     # pending in-graph index checks (bounds.Check)
host_checks_passed: dict = {}  # id(host index) -> (weakref, ranges it passed)
index_guards: dict = {}     # id(index Value) -> (weakref, range, clamped Value): flagged ones
bounds_mode = {"unchecked": 0, "outer": None, "in_graph": 0}  # context-manager depths

# -- early_outputs.py
early_reads: dict = {}      # graph key -> positions of outputs read on the host after its launch
split_plans: dict = {}      # graph key -> early_outputs.SplitPlan, None (no split), _Declined (not yet)
backward_cuts: set = set()  # subgraph templates of backwards a step is launched before
cut_step = [False]          # the step being captured was launched before its backward: its template
cut_graphs: dict = {}       # backward template -> keys of the graphs of its newest cut step
one_graph_depth = [0]       # early_outputs.one_graph() blocks under way: no cut

# -- decompose.py
decompose_plans: dict = {}  # (op, specs, constants) -> traced decomposition, or why not
import_checks: dict = {}    # the same key -> its import-time decomposition reads values
decompose_table: list = [None, None]  # [DENIED snapshot, capture table]

# -- supported.py: ops whose fallback was logged (warned once per process)
fallback_warned: set = set()

# -- random.py: lists collecting seeds drawn (compile_train_step's replays)
seed_logs: list = []

# Elsewhere, cleared by reset() through the owners' names:
#   tensor.live_storages            storages that may hold pending values
#   graph.debug.forget_compiles()   graphs remembered to explain recompiles
#   compile_service.memory_cache    compiled modules, by graph key
#   compile_service.size_families   graph families seen and their dynamic-size plans
#   ops.support.DENIED              ops denied at run time (a failed compile)
#   ops.support.DENIED_SIGNATURES   argument signatures denied at run time
_DENIED_AT_IMPORT = dict(support.DENIED)


def reset() -> None:
    """Forget everything capture learned or holds since import: plans, lifted
    scalars, pending index checks, the target, compiled modules, ops denied
    at run time, the recompile memory; no storage stays tracked as pending.

    For tests. Lazy tensors that are still alive keep their values: a pending
    one is no longer computed by ``mark_step``, but still by reading it."""
    if dry_run[0] is not None:
        raise RuntimeError("lazy-mlir: reset() inside lm.check_coverage")
    for table in (shape_memo, record_plans, emit_plans, view_plans, scalar_tensors, lifted_ints,
                  roll_shifts, empty_values,
                  factory_values, list_replays,
                  inplace_checked, host_checks_passed, decompose_plans, import_checks,
                  fallback_warned, early_reads, split_plans, backward_cuts, cut_graphs):
        table.clear()
    trace_seconds[0] = 0.0
    step_clock[:] = [time.perf_counter(), 0.0]
    graph_epoch[0] += 1  # (offsets' counts of the graph: their tables are gone)
    dispatch_depth[0] = 0
    cut_step[0] = False
    one_graph_depth[0] = 0
    target[0] = None
    index_checks.clear()
    index_guards.clear()
    bounds_mode.update(unchecked=0, outer=None, in_graph=0)
    decompose_table[:] = [None, None]
    seed_logs.clear()
    for storage in list(live_storages):
        live_storages.discard(storage)
    debug.forget_compiles()
    memory_cache.clear()
    size_families.forget()
    support.DENIED.clear()
    support.DENIED.update(_DENIED_AT_IMPORT)
    support.DENIED_SIGNATURES.clear()
    gc_hold.release()
