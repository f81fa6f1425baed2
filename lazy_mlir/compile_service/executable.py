"""What the compile service answers for a graph: one ``Executable``.

Every way in (mark_step, ``compile_train_step``, ``lm.jit``, the Dynamo
backend) gets one of three kinds, told apart by ``state``:

- ``LOADED``: a module loaded on the target's session
  (``runtime.session.LoadedModule``), called on device arrays;
- ``COMPILING`` (``CompilingExecutable``): its module compiles in a worker;
  meanwhile the graph's fx module runs eagerly on the host, no op blamed
  (not a fallback);
- ``FAILED`` (``EagerExecutable``): the graph could not be compiled or its
  module not loaded; its fx module runs on the host, the blamed ops counted as
  fallbacks.

The two eager kinds share ``gm`` (called on host tensors) and ``ops``. This
module also decides what a failed compile means (``compile_or_fallback``):
the pipeline below only raises.
"""
from __future__ import annotations

import logging
from typing import ClassVar, Protocol, runtime_checkable

from ..dialects.runner import PipelineError
from ..pipeline.compile import CompiledGraph, InPlaceHazard, compile_graph
from ..pipeline.fx_graph import to_fx

log = logging.getLogger("lazy_mlir")

LOADED, COMPILING, FAILED = "loaded", "compiling", "failed"


@runtime_checkable
class Executable(Protocol):
    """Something that runs a graph. ``state``: ``LOADED``, ``COMPILING`` or
    ``FAILED``; ``seconds``: the last compiled run's wall time (None for the
    eager kinds, which are never timed)."""

    state: ClassVar[str]
    seconds: float | None


class EagerExecutable:
    """A graph that could not be compiled or loaded: its fx module runs on the
    host. ``ops``: the op names blamed (reported as fallbacks when it runs)."""

    state: ClassVar[str] = FAILED
    seconds = None  # never timed: it runs on the worker (see LoadedModule.seconds)

    def __init__(self, gm, ops):
        self.gm = gm
        self.ops = ops


class CompilingExecutable(EagerExecutable):
    """A graph whose module compiles in a worker: it runs eagerly meanwhile
    (no op blamed: not a fallback). ``future``: the worker's answer; ``job``:
    ``(graph, target, config, shared key)``, for the failure's bookkeeping
    and the cache keys when settled)."""

    state: ClassVar[str] = COMPILING

    def __init__(self, gm, future, job):
        super().__init__(gm, [])
        self.future = future
        self.job = job


def fx_module_of(graph):
    """The fx module ``graph`` compiles from (its ``fx_module``, else
    ``to_fx(graph)``: the lazy device's captured graphs)."""
    gm = getattr(graph, "fx_module", None)
    return to_fx(graph) if gm is None else gm


def compile_or_fallback(graph, target, config, *, stages=None, compiler=None,
                        gm=None) -> CompiledGraph | EagerExecutable:
    """``pipeline.compile.compile_graph``, where a graph that fails to lower
    or compile, or that IREE would miscompile, becomes an ``EagerExecutable``
    (never an exception from the pipeline): ``fallback_for``."""
    try:
        if gm is None:
            gm = fx_module_of(graph)
        return compile_graph(graph, target, config, stages=stages, compiler=compiler, gm=gm)
    except Exception as e:
        return fallback_for(graph, e, gm)


def fallback_for(graph, error: Exception, gm) -> EagerExecutable:
    """What a failed compile of ``graph`` runs: the graph's own
    ``fallback(error)`` where it has one (the Dynamo backend's aot graphs);
    else, for a ``PipelineError``, ``gm`` eagerly, the error logged, and the
    ops blamed for it no longer captured for compilation. Any other error
    is raised."""
    own = getattr(graph, "fallback", None)
    if own is not None:
        return own(error)
    if isinstance(error, InPlaceHazard):
        ops = sorted(_op_names(graph) & error.blamed)
        log.warning("%s; the graph runs eagerly on the CPU", error)
        return EagerExecutable(gm, ops or [_base_name(graph.nodes[-1].op)])
    if not isinstance(error, PipelineError):
        raise error
    ops = list(error.unlowered)
    _deny(graph, ops, f"compile failed: {error}")
    log.warning("%s\n  the graph runs eagerly on the CPU%s", error,
                f"; not compiled again for these argument dtypes and ranks: {', '.join(ops)}"
                if ops else "")
    return EagerExecutable(gm, sorted({o.split(".")[0] for o in ops})
                           or [_base_name(n.op) for n in graph.nodes])


def eager_executable(graph) -> EagerExecutable:
    """``graph`` run eagerly, every op of it blamed (a module the runtime
    cannot load)."""
    return EagerExecutable(fx_module_of(graph), [_base_name(n.op) for n in graph.nodes])


def _base_name(op) -> str:
    return op.__name__.split(".")[0]


def _op_names(graph) -> set[str]:
    return {_base_name(n.op) for n in graph.nodes}


def _deny(graph, ops: list[str], why: str) -> None:
    """Stop compiling the blamed ops for the argument signatures they had in
    ``graph``; an op no node of the graph is (one an import decomposition
    made) is stopped for every signature."""
    from ..ops.support import deny, deny_signature, mlir_name
    from ..graph.ir import arg_signature
    for op in ops:
        nodes = [n for n in graph.nodes if getattr(n.op, "_overloadname", None) is not None
                 and mlir_name(n.op) == op]
        for n in nodes:
            deny_signature(op, arg_signature(n.flat), why)
        if not nodes:
            deny(op, why)
