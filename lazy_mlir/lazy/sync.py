"""Sync points: cut the pending graph, compile or reuse it, run it.

``execute(values)`` builds the graph computing the values, looks it up in the
compiled-module cache by (graph key, target, config), compiles it on a miss,
runs it on the target's IREE session and binds the results to the values as
device data. A graph that fails to compile runs eagerly on the CPU instead:
its error and repro are logged once, the failing ops stop being compiled, and
no data is lost.
"""
from __future__ import annotations

import logging
import time

import torch

from . import bounds, early_outputs, gc_hold, read_outputs
from . import tensor as _tensor
from .. import metrics
from .capture import emit, value_of
from ..graph.program import Graph
from ..graph.ir import DeviceData, Value
from ..graph.ir import newest as newest_node
from .state import dispatch_depth, dry_run as _dry_run, graph_epoch, step_clock, \
    target as _target, trace_seconds
from .supported import note_fallback
from .tensor import LazyTensor, live_storages
from ..config import current_config
from ..compile_service.executable import EagerExecutable
from ..compile_service.lookup import executable_for, still_compiling
from ..host_calls.runtime import switches as host_calls
from ..runtime import run_queue
from ..targets import get_target

log = logging.getLogger("lazy_mlir")


def current_target():
    if _target[0] is None:
        _target[0] = get_target()
    return _target[0]


def set_target(name: str) -> None:
    _target[0] = get_target(name)


def execute(values: list[Value], everything: bool = False,
            on_calling_thread: bool = False):
    """Launch every pending value in ``values`` as one graph (with the index
    checks it can compute; all pending ones with ``everything``). Ends the
    step's hold on the garbage collector (``gc_hold``), once its nodes are
    freed. ``on_calling_thread``: the graph runs on the worker thread alone
    (``Graph.on_calling_thread``). The split decides with ``step_seconds()``.
    Returns ``launch``'s (graph, entry, checks), or None if nothing was launched."""
    try:
        return _execute(values, everything, step_seconds(), on_calling_thread)
    finally:
        gc_hold.release()


def _execute(values: list[Value], everything: bool, capture_seconds: float,
             on_calling_thread: bool):
    if _dry_run[0] is not None:  # lm.check_coverage compiles nothing
        return None
    # Pending, each once, in order (Values hash by identity).
    roots = [v for v in dict.fromkeys(values) if v.data is None]
    if not roots and not (everything and bounds.pending()):
        return None
    started = time.perf_counter()
    graph_epoch[0] += 1
    try:
        return launch(roots, everything=everything, capture_seconds=capture_seconds,
                      on_calling_thread=on_calling_thread)
    finally:
        if dispatch_depth[0]:  # a sync inside an op: not capture time
            trace_seconds[0] -= time.perf_counter() - started


def launch(roots: list[Value], leading=(), everything: bool = False,
           capture_seconds: float = 0.0, on_calling_thread: bool = False):
    """Cut the graph computing ``roots`` (``leading``: data that become its
    first inputs, in this order), compile or reuse it and launch it; the
    roots become device data filled in the background. Returns (graph, its
    module entry, the index checks whose flags are its last output)."""
    checks = []

    def flags(order):
        # (a graph with leading inputs, compile_train_step's recording, has
        # its outputs laid out by its caller: nothing more)
        more, added = (([], None) if everything or leading
                       else read_outputs.extra_outputs(order, roots))
        flag, taken = bounds.take_flag({**order, **added} if added else order, everything, emit)
        checks.extend(taken)
        return more + [flag]

    graph = Graph.build(roots, leading, extra=flags)
    graph.on_calling_thread = on_calling_thread
    target = current_target()
    config = host_calls.session_config(target, current_config())
    entry = executable_for(graph, target, config)
    plan = None if leading else early_outputs.plan_for(graph, entry, bool(checks),
                                                       capture_seconds)
    # The launch that submits the parts' compiles runs them (eagerly, as any
    # graph compiling in the background); until both are compiled, the whole
    # graph's module runs.
    if plan is not None and not (still_compiling(plan.early_key, target, config)
                                 or still_compiling(plan.rest_key, target, config)):
        return _launch_split(graph, plan, target, config, checks)
    datas = _bind(graph.outputs)
    run_entry(entry, graph.inputs, datas, checks, graph)
    if datas:
        early_outputs.launched(graph.key, datas[0].future, datas)
    return graph, entry, checks


def _bind(values: list[Value]) -> list[DeviceData]:
    """New device data for ``values``, bound to them (filled by their run)."""
    datas = [DeviceData(v.spec) for v in values]
    for v, d in zip(values, datas):
        v.materialize(d)
    return datas


def _launch_split(graph, plan, target, config, checks):
    """Launch ``graph`` as its early part, then the rest (``early_outputs``)."""
    early = early_outputs.early_graph(graph, plan)
    early_entry = executable_for(early, target, config)
    early_data = _bind(early.outputs)
    run_entry(early_entry, early.inputs, early_data, checks if plan.flag_early else (), early)
    rest = early_outputs.rest_graph(graph, plan, early_data)
    rest_entry = executable_for(rest, target, config)
    rest_data = _bind(rest.outputs)
    run_entry(rest_entry, rest.inputs, rest_data, () if plan.flag_early else checks, rest)
    metrics.counter_inc("SplitLaunch")
    return graph, rest_entry, checks


# A module whose last run took less runs in the caller's thread when the
# worker is idle: handing it over and waiting for it (two thread wake-ups)
# cost 0.1-0.4 ms a step for LeNet at batch 1 (``benchmarks/train_step.py
# --models lenet``), more than the run it could overlap.
INLINE_BELOW_SECONDS = 1e-3


def run_entry(entry, inputs: list[DeviceData], outputs: list[DeviceData], checks=(),
              graph=None) -> None:
    """Run a module entry on the worker, in launch order; ``outputs`` are
    filled when it has run (reading one waits for it). ``graph``: the graph
    the entry runs, to run eagerly should the runtime refuse the module."""
    inline = entry.seconds is not None and entry.seconds < INLINE_BELOW_SECONDS
    future = run_queue.submit(_run, entry, inputs, outputs, current_target(), checks, graph,
                              inline=inline)
    for d in outputs:
        d.future = future


def _check_shapes(arrays, outputs: list[DeviceData]) -> None:
    """Raises where a module with dynamic dimensions returned a result of
    another shape than its graph's: never a value read with a wrong shape."""
    for a, d in zip(arrays, outputs):
        if tuple(a.shape) != d.spec.shape:
            raise RuntimeError(f"lazy-mlir: a module with dynamic dimensions returned shape "
                               f"{tuple(a.shape)} for {d.spec.shape} (a bug: please report it; "
                               "LAZY_MLIR_DYNAMIC=0 compiles one module per size)")


def _run(entry, inputs: list[DeviceData], outputs: list[DeviceData], target,
         checks=(), graph=None) -> None:
    """In the worker: run one graph and fill its output data."""
    from ..runtime.session import session_for  # (IREE's runtime: loaded on the first run)
    t0 = time.perf_counter()
    if isinstance(entry, EagerExecutable):
        if entry.ops:  # (none blamed: it runs eagerly while its module compiles)
            metrics.counter_inc("EagerGraph")  # a whole graph that failed to compile
        _run_eagerly(entry.gm, entry.ops, inputs, outputs)
    elif getattr(entry, "refused", None) is not None:
        metrics.counter_inc("EagerGraph")
        _run_eagerly(entry.refused, (), inputs, outputs)
    else:
        session = session_for(target)
        args = []
        waited = None
        for d in inputs:
            f = d.future
            if f is not None:  # (``d.wait()``: most inputs share the previous step's job)
                if f is not waited:
                    f.result()
                    waited = f
                d.future = None
            if d.device is None:
                d.device = session.to_device(d.host)
            args.append(d.device)
        try:
            outs = entry(*args)
        except _INVOKE_ERRORS as e:
            if graph is None or not str(e).startswith("Error invoking function"):
                raise
            _refused(entry, graph, e)
            return _run(entry, inputs, outputs, target, checks, graph)
        if getattr(entry, "dynamic_dims", False):
            _check_shapes(outs, outputs)
        for d, o in zip(outputs, outs):
            d.device = o
        entry.seconds = time.perf_counter() - t0
    metrics.add_sample("ExecuteTime", time.perf_counter() - t0)
    if checks:  # the last output: the graph's index-check flags (one small read)
        flag = outputs[-1]
        flags = flag.host if flag.host is not None else \
            session_for(target).to_host(flag.device, flag.spec)
        try:
            bounds.raise_if_flagged(flags, checks)
        except (IndexError, RuntimeError, OverflowError):
            for d in outputs:  # nothing a failed graph computed can be read: it raises
                d.host = d.device = None
            raise


# What IREE's runtime raises for a module it refuses to run (a status code
# turned into Python's exception of that kind)
_INVOKE_ERRORS = (IndexError, ValueError, RuntimeError, MemoryError)


def _run_eagerly(gm, ops, inputs: list[DeviceData], outputs: list[DeviceData]) -> None:
    for op in ops:
        note_fallback(op, "its graph failed to compile")
    outs = gm(*[host_of(d) for d in inputs])
    for d, o in zip(outputs, outs):
        d.host = o.contiguous()


def _refused(entry, graph, error) -> None:
    """The runtime refused ``entry``'s module (it compiled, but IREE will not
    run it: ``binding count 33 > 32``): its graph runs eagerly from now on,
    counted and said once, as a graph that failed to compile. Its first run
    was on copies of its arguments (``LoadedModule``): nothing was lost."""
    from ..compile_service.executable import fx_module_of
    entry.refused = fx_module_of(graph)
    metrics.counter_inc("RefusedModule")
    log.warning("lazy-mlir: IREE's runtime refused to run a compiled module; its graph runs "
                "eagerly on the CPU from now on (counted RefusedModule in lm.metrics; please "
                "report it with the graph, LAZY_MLIR_DUMP_DIR writes it): %s",
                str(error).split(";")[0])


def host_of(d: DeviceData) -> torch.Tensor:
    """The host copy of device data, waiting for the graph computing it."""
    if d.host is None:
        d.wait()
    if d.host is None:
        from ..runtime.session import session_for
        d.host = session_for(current_target()).to_host(d.device, d.spec)
    return d.host


def to_host(t: torch.Tensor) -> torch.Tensor:
    """The value of a lazy tensor on the host (computed if pending).

    The result is shared with the device data: callers that hand it to users
    must copy it.
    """
    if not isinstance(t, LazyTensor):
        return t
    if _dry_run[0] is not None:
        return _dry_run[0].host_stand_in(t)
    v = value_of(t)
    if v.pending:
        execute([v])
    if v.data.future is not None:  # read before its graph is known to have run
        early_outputs.note_read(v.data)
        started = time.perf_counter()
        host = host_of(v.data)
        _waited(time.perf_counter() - started)
    else:
        host = host_of(v.data)
    run_queue.raise_pending_error()  # a graph launched before failed (an index check): say so now
    return host


def mark_step() -> None:
    """Launch all pending live tensors as one graph and return; the graph runs
    in the background (``wait_device_ops`` joins it), or here when its module
    last ran in under ``INLINE_BELOW_SECONDS`` and nothing else runs."""
    if _dry_run[0] is not None:
        return _dry_run[0].on_mark_step()
    run_queue.raise_pending_error()
    metrics.counter_inc("MarkStep")
    metrics.add_sample("TraceTime", trace_seconds[0])
    trace_seconds[0] = 0.0
    cut = early_outputs.take_cut()
    launched_key = _launch_live(bool(cut))
    if cut:
        early_outputs.note_rest(cut, launched_key)
    step_clock[:] = [time.perf_counter(), 0.0]
    graph_epoch[0] += 1
    newest_node[0] = None  # (held for a checkpoint's recompute only: frees its inputs)


def step_seconds() -> float:
    """The host's time for the step being captured: the wall time since the
    last ``mark_step``, less its waits for graphs to run (``_waited``)."""
    began, waited = step_clock
    return time.perf_counter() - began - waited


def _waited(seconds: float) -> None:
    """The host waited ``seconds`` for a graph to run: not part of the step's
    capture (``step_seconds``; ``TraceTime`` for a read inside an op, as
    ``item()``)."""
    step_clock[1] += seconds
    if dispatch_depth[0]:
        trace_seconds[0] -= seconds


def cut_before_backward(template: str) -> bool:
    """Whether a backward from ``template`` first launches what is pending
    (``early_outputs.cut_before``): not while the graphs of its newest cut
    step still compile. The step whose cut submits them runs them eagerly, as
    any graph compiling in the background; until both are compiled, steps
    are not cut and the whole step's module runs (compiled, or it would not
    have been cut)."""
    if not early_outputs.cut_before(template):
        return False
    target = current_target()
    config = host_calls.session_config(target, current_config())
    return not any(still_compiling(k, target, config) for k in early_outputs.cut_keys(template))


def launch_before_backward(template: str) -> None:
    """Launch every pending live tensor now, on the worker thread alone: the
    forward of a step whose loss is read right after it, which then runs
    while its backward and update are captured (``early_outputs.cut_before``)."""
    if _dry_run[0] is not None:
        return
    early_outputs.note_cut(template, _launch_live(True))


def _launch_live(on_calling_thread: bool) -> str | None:
    """Launch every pending live tensor; the key of the graph launched, if any."""
    storages = list(live_storages)
    launched = execute([s.value for s in storages], everything=True,
                       on_calling_thread=on_calling_thread)
    for s in storages:
        if s.value.data is not None:
            live_storages.discard(s)
    return launched[0].key if launched else None


def wait_device_ops() -> None:
    """Block until all launched graphs have run; raise a worker error."""
    started = time.perf_counter()
    try:
        run_queue.wait_all()
    finally:
        _waited(time.perf_counter() - started)


_tensor._to_host = to_host  # the hook LazyTensor.__repr__ calls (tensor.py)
