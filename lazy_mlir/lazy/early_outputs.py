"""Results read on the host right after a step, computed by a graph of their own.

In the plain loop, ``mark_step(); loss.item()`` waits for the whole step's
module (forward, backward, optimizer update) although the loss needs only
the forward. When the host reads some outputs of a launched graph before
the next launch (``note_read``), the next launch of a graph with the same
key is split in two (``plan_for``, decided once per key):

- ``early``: the nodes those outputs need (and the index-check flags, so a
  bad index still raises before its result is read), with the values the
  rest of the graph takes from them as extra outputs;
- ``rest``: every other node, reading the early graph's outputs as inputs.

Both run on the worker in launch order. The read waits for the early graph
only (``loss.item()`` runs it in its own thread, ``worker.Job.result``);
the rest runs on the worker while the next step is being captured. Each
part is a graph of its own with a key derived from the whole graph's key
and the plan, compiled and cached like any other. The plan is positions in
the whole graph's node and input lists, valid for every graph of its key:
replaying it walks nothing.

The rest runs on the worker thread alone (``Graph.on_calling_thread``), on
one core, while the capture of the next step has the other. So a split is
made only where it can pay and the rest can hide behind the next capture:
the whole module's last run took at least ``MIN_SECONDS`` and at most as
long as the host took for its step (``sync.mark_step``: since the last one,
less the waits for graphs to run), and the early part is at most
``MAX_EARLY_FRACTION`` of the work (``_weight``). The timing is judged at
the key's first ``TIMED_DECISIONS`` launches after its module has run
compiled, and a "no" then is final: the graphs a program runs stop changing
after warm-up. ``LAZY_MLIR_SPLIT=0`` turns it off.

Where the early part is a training step's forward (the loss read, the
backward a ``subgraph`` node of the rest: ``lazy/backward.py``), the step is
cut earlier instead: from then on, a backward from the same template first
launches everything pending (``cut_before``, ``sync.launch_before_backward``),
so the forward runs while the backward and the update are captured, and
``mark_step`` launches the rest. The loss is then ready when it is read.
Both run on the worker thread alone. As for a split, until the cut's two
graphs are compiled the steps are not cut (``sync.cut_before_backward``).
Graphs traced as one (compile_train_step, ``lm.jit``, export) are never cut
(``one_graph``).
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
from dataclasses import dataclass

from .. import metrics
from ..config import switched_on
from ..graph.program import Graph
from ..ops import subgraph
from ..graph.ir import DeviceData
from .state import backward_cuts, cut_graphs, cut_step, early_reads, one_graph_depth, split_plans

# The whole module's last run time below which a split cannot repay its
# second launch (~0.1 ms of Python and a worker hand-off).
MIN_SECONDS = 0.5e-3
# An early part of more of the nodes leaves too little to overlap.
MAX_EARLY_FRACTION = 0.6
# Launches of a key whose timing ``pays`` judges before a "no" is final: a
# module's first compiled run pays one-time costs (allocations, first
# touches) and may look too slow; its second decides. Asked at every launch,
# a "yes" came whenever the timings happened to cross, at any step, and its
# two graphs compiled then (seconds, long after warm-up).
TIMED_DECISIONS = 2

_SUBGRAPH = subgraph.ops.subgraph.default
# (graph key, its job, id of each output's data) of the newest launch: ids,
# not the data, which the user may free meanwhile (``zero_grad``'s grads)
_last_launch: list = [None]


def enabled() -> bool:
    return switched_on("LAZY_MLIR_SPLIT")


def launched(key: str, job, datas: list[DeviceData]) -> None:
    """Remember the newest launch, whose reads ``note_read`` learns from."""
    _last_launch[0] = (key, job, list(map(id, datas)))


def note_read(d: DeviceData) -> None:
    """``d`` is read on the host while the graph computing it may still run:
    if the newest launch computes it, remember its position for that key."""
    last = _last_launch[0]
    if last is None or d.future is not last[1] or not enabled():
        return  # (its job's data are alive: their ids are theirs alone)
    key, _, ids = last
    i = ids.index(id(d))
    seen = early_reads.setdefault(key, set())
    if i not in seen:
        seen.add(i)
        split_plans.pop(key, None)  # decide again, with this output early too


@dataclass(frozen=True)
class SplitPlan:
    """Positions in the whole graph (``nodes``, ``inputs``, ``outputs``)."""

    early_nodes: tuple[int, ...]
    rest_nodes: tuple[int, ...]
    early_inputs: tuple[int, ...]       # whole-graph input positions, in order
    early_outputs: tuple[tuple, ...]    # (node position, place in its ``outputs``) per early output
    rest_inputs: tuple[int, ...]        # whole-graph input positions, then...
    rest_from_early: tuple[int, ...]    # ...early output positions
    rest_outputs: tuple[int, ...]       # whole-graph output positions the rest computes
    early_key: str
    rest_key: str
    flag_early: bool                    # the index-check flags are the early part's last output


@dataclass(frozen=True)
class _Declined:
    """``split_plans``' value for a key whose timing did not pay ``times``
    times, fewer than ``TIMED_DECISIONS`` (not decided yet)."""

    times: int


def plan_for(graph: Graph, entry, has_checks: bool, capture_seconds: float) -> SplitPlan | None:
    """The split of ``graph`` (its key's), or None where it does not pay;
    ``capture_seconds``: the host's time for the step that made it (since
    the last ``mark_step``, less its waits for graphs to run)."""
    reads = early_reads.get(graph.key)
    if not reads or not enabled():
        return None
    plan = split_plans.get(graph.key, False)
    if plan is not False and type(plan) is not _Declined:
        return plan
    seconds = getattr(entry, "seconds", None)
    if seconds is None:
        return None  # (not run compiled yet: asked again next launch)
    if not pays(seconds, capture_seconds):  # (too short or long: final at the last decision)
        times = (plan.times if type(plan) is _Declined else 0) + 1
        split_plans[graph.key] = None if times >= TIMED_DECISIONS else _Declined(times)
        if times >= TIMED_DECISIONS:
            metrics.counter_inc("SplitNotPaying")
        return None
    early = sorted(reads)
    if has_checks:  # (the flags are the graph's last output)
        early.append(len(graph.outputs) - 1)
    plan = _make_plan(graph, early, has_checks)
    backwards = _backwards_after(graph, plan) if plan is not None else ()
    if backwards:  # (later steps are cut before their backward: nothing to split)
        backward_cuts.update(backwards)
        split_plans[graph.key] = None
        metrics.counter_inc("SplitAtBackward")
        return None
    split_plans[graph.key] = plan
    metrics.counter_inc("SplitPlanned" if plan else "SplitDeclined")
    return plan


def _backwards_after(graph: Graph, plan: SplitPlan) -> tuple[str, ...]:
    """The templates of the backwards (``subgraph`` nodes) in the rest of a
    plan, if none is early."""
    nodes = graph.nodes
    if any(nodes[p].op is _SUBGRAPH for p in plan.early_nodes):
        return ()
    return tuple(nodes[p].flat[-1] for p in plan.rest_nodes if nodes[p].op is _SUBGRAPH)


def cut_before(template: str) -> bool:
    """Whether a backward recorded from ``template`` first launches what is
    pending (``sync.launch_before_backward``)."""
    return template in backward_cuts and not one_graph_depth[0] and enabled()


def note_cut(template: str, forward_key: str | None) -> None:
    """The step being captured was launched before its backward (``forward_key``:
    the graph launched then)."""
    cut_step[0] = template
    cut_graphs[template] = [forward_key, None]
    metrics.counter_inc("SplitLaunch")


def take_cut() -> str | bool:
    """The template of the backward the step ``mark_step`` ends was cut
    before (its rest then runs on the worker thread alone), or False."""
    was, cut_step[0] = cut_step[0], False
    return was


def note_rest(template: str, rest_key: str | None) -> None:
    """``mark_step`` launched the rest of a step cut before ``template``."""
    keys = cut_graphs.get(template)
    if keys is not None:
        keys[1] = rest_key


def cut_keys(template: str) -> list[str]:
    """The keys of the graphs the newest step cut before ``template`` launched."""
    return [k for k in cut_graphs.get(template, ()) if k is not None]


@contextlib.contextmanager
def one_graph():
    """No step is cut inside: the caller traces one as a single graph."""
    one_graph_depth[0] += 1
    try:
        yield
    finally:
        one_graph_depth[0] -= 1


def pays(seconds: float, capture_seconds: float) -> bool:
    """Whether a module whose run took ``seconds`` after ``capture_seconds``
    of capture is worth splitting (long enough to repay a second launch,
    short enough for its rest to run behind the next step's capture)."""
    return MIN_SECONDS <= seconds <= capture_seconds


def _make_plan(graph: Graph, early_outputs: list[int], flag_early: bool) -> SplitPlan | None:
    nodes = graph.nodes
    position = {id(n): i for i, n in enumerate(nodes)}
    input_position = {id(d): i for i, d in enumerate(graph.inputs)}

    def producer(v):  # node position of a pending value, or None for data
        return None if v.data is not None else position[id(v.node)]

    # The early cone: every node the early outputs need.
    cone = set()
    stack = [producer(graph.outputs[r]) for r in early_outputs]
    while stack:
        p = stack.pop()
        if p is None or p in cone:
            continue
        cone.add(p)
        stack.extend(producer(v) for v in nodes[p].inputs)
    weights = [_weight(n) for n in nodes]
    early_weight = sum(weights[p] for p in cone)
    if not cone or len(cone) == len(nodes) or early_weight > MAX_EARLY_FRACTION * sum(weights):
        return None
    early_nodes = tuple(p for p in range(len(nodes)) if p in cone)
    rest_nodes = tuple(p for p in range(len(nodes)) if p not in cone)

    def inputs_of(ps):
        seen = {}
        for p in ps:
            for v in nodes[p].inputs:
                if v.data is not None:
                    seen.setdefault(input_position[id(v.data)], None)
        return tuple(seen)

    # Early outputs: the read ones, values the rest takes, whole-graph
    # outputs in the cone; the flags last (``sync._run`` reads them there).
    outs: dict = {}
    root_at = {}
    for r, v in enumerate(graph.outputs):
        if v.data is None and position[id(v.node)] in cone:
            root_at[r] = (position[id(v.node)], v.index)
    flag = root_at.pop(len(graph.outputs) - 1) if flag_early else None
    for r in early_outputs:
        if r in root_at:
            outs.setdefault(root_at[r], None)
    for p in rest_nodes:
        for v in nodes[p].inputs:
            if v.data is None and position[id(v.node)] in cone:
                outs.setdefault((position[id(v.node)], v.index), None)
    for r, at in root_at.items():
        outs.setdefault(at, None)
    if flag is not None:
        outs.pop(flag, None)
        outs[flag] = None
    early_outs = tuple(outs)
    out_index = {at: j for j, at in enumerate(early_outs)}
    places = tuple((p, [v.index for v in nodes[p].outputs].index(i)) for p, i in early_outs)
    rest_from_early = tuple(dict.fromkeys(
        out_index[(position[id(v.node)], v.index)]
        for p in rest_nodes for v in nodes[p].inputs
        if v.data is None and position[id(v.node)] in cone))
    rest_outputs = tuple(r for r in range(len(graph.outputs)) if r not in root_at
                         and not (flag_early and r == len(graph.outputs) - 1))
    h = hashlib.sha256(f"{graph.key}|split|{early_nodes}|{early_outs}".encode())
    return SplitPlan(early_nodes, rest_nodes, inputs_of(early_nodes), places,
                     inputs_of(rest_nodes), rest_from_early, rest_outputs,
                     h.hexdigest() + ":early", h.hexdigest() + ":rest", flag_early)


def early_graph(graph: Graph, plan: SplitPlan) -> Graph:
    nodes, inputs = graph.nodes, graph.inputs
    outputs = [nodes[p].outputs[k] for p, k in plan.early_outputs]
    return Graph([nodes[p] for p in plan.early_nodes], [inputs[i] for i in plan.early_inputs],
                 outputs, plan.early_key)


def rest_graph(graph: Graph, plan: SplitPlan, early_data: list[DeviceData]) -> Graph:
    """(After the early graph's outputs are bound to ``early_data``.)"""
    nodes, inputs = graph.nodes, graph.inputs
    return Graph([nodes[p] for p in plan.rest_nodes],
                 [inputs[i] for i in plan.rest_inputs] + [early_data[j] for j in plan.rest_from_early],
                 [graph.outputs[r] for r in plan.rest_outputs], plan.rest_key,
                 on_calling_thread=True)


def _weight(node) -> int:
    """A node's share of the work, roughly: the ops of a subgraph (a whole
    backward is one node, ``lazy/backward.py``), the results of a
    multi-tensor op (a fused optimizer update), else one."""
    if node.op is _SUBGRAPH:
        return _template_ops(node.flat[-1])
    return max(1, sum(s is not None for s in node.specs))


@functools.lru_cache(maxsize=None)
def _template_ops(key: str) -> int:
    return sum(n.op == "call_function" for n in subgraph.template(key).gm.graph.nodes)
