"""The one compile path: a captured graph, a target and a config -> a module.

``compile_graph`` is what ``mark_step`` (``runtime.module_cache.module_for``)
and ``lm.jit`` call; it is built from two stage-level pieces that the callers
without a captured graph use directly (export's torch.export route, the
``lazy-mlir compile`` command):

- ``lower_graph``: the graph's fx module lowered for ``target`` (the target's
  rewrites: im2col/channels-last convolutions on cpu, ...);
- ``compile_module``: the lowered stages -> a ``CompiledGraph``: the iree
  flags of the target and config, the arguments the runtime must copy or
  pass through (``in_place``), and the in-place hazards IREE would compute
  wrongly (raised as ``PipelineError`` before anything is compiled).

``compile_graph`` decides what a failure means: with ``fallback`` (mark_step)
a failed or hazardous graph becomes an ``EagerEntry`` (its fx module runs on
the host) and the ops blamed for a failure are denied; without, it raises.
Nothing here loads a module: that is the runtime's part.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace

from .. import metrics
from ..config import PipelineConfig
from ..dialects.runner import PipelineError
from ..targets import Target
from .fx_graph import to_fx
from .in_place import (argument_read_after_in_place_write, clobbered_args, returned_args,
                       shared_sort_operands, unshare_sort_operands)
from .stages import Compiled, Stage, compile_stages, lower

log = logging.getLogger("lazy_mlir")

_SORT_LIKE = {"sort", "topk", "argsort", "msort", "kthvalue", "median", "nanmedian", "mode"}
_IN_PLACE_LIKE = {"slice_scatter", "select_scatter", "copy_", "index_put", "as_strided_scatter"}
# (check, the ops a hazard it finds is blamed on): each returns what IREE would
# update in place while another result still reads it, or None.
_HAZARDS = ((shared_sort_operands, _SORT_LIKE),
            (argument_read_after_in_place_write, _IN_PLACE_LIKE))


class InPlaceHazard(PipelineError):
    """IREE would update ``value`` in place while another result reads it:
    the module would compute a wrong answer, so it is not compiled."""

    def __init__(self, message: str, value: str, blamed: frozenset[str]):
        super().__init__(message, None)
        self.value = value
        self.blamed = blamed


class EagerEntry:
    """A graph that could not be compiled: run its fx module on the host.
    ``ops``: the op names blamed (reported as fallbacks when it runs)."""

    seconds = None  # never timed: it runs on the worker (see LoadedModule.seconds)

    def __init__(self, gm, ops):
        self.gm = gm
        self.ops = ops


@dataclass(frozen=True)
class CompiledGraph:
    """A compiled module and how to load it. ``clobbered``: arguments of
    ``main`` a sort-like op writes into (the runtime passes copies);
    ``passthrough``: (result, argument) pairs of results that are arguments
    returned unchanged (the runtime answers them with the argument). Both
    index ``main``'s arguments as lowered, before any parameter binding."""

    compiled: Compiled
    clobbered: tuple[int, ...] = ()
    passthrough: tuple[tuple[int, int], ...] = ()

    @property
    def vmfb(self) -> bytes:
        return self.compiled.vmfb

    @property
    def flags(self) -> tuple[str, ...]:
        return self.compiled.flags

    @property
    def stages(self) -> tuple[Stage, ...]:
        return self.compiled.stages

    @property
    def target(self) -> Target:
        return self.compiled.target


def lower_graph(graph, target: Target, config: PipelineConfig, gm=None) -> tuple[Stage, ...]:
    """``graph`` lowered stage by stage with ``target``'s rewrites (``gm``:
    its fx module, if already made)."""
    return lower(to_fx(graph) if gm is None else gm, config, target.name)


def compile_module(stages: tuple[Stage, ...], target: Target, config: PipelineConfig,
                   bind=None) -> CompiledGraph:
    """The last of ``stages`` (linalg, or torch for IREE's torch input)
    compiled for ``target``, with the protections its loader needs.

    Raises ``InPlaceHazard`` (before compiling) when IREE would miscompile
    the module, ``PipelineError`` when iree-compile fails. ``bind``:
    ``(entry name, keys, scope)`` for ``dialects.export_import.bind_parameters``
    (export): arguments with a key become IREE parameters and ``main`` is
    renamed; the protections still index the unbound arguments.
    """
    text = stages[-1].text
    unshared = unshare_sort_operands(text)
    if unshared is not text:
        text = unshared
        stages = stages[:-1] + (replace(stages[-1], text=text),)
    for check, blamed in _HAZARDS:
        value = check(text)
        if value:
            raise InPlaceHazard(f"lazy-mlir: IREE updates {value} in place while another "
                                f"result still reads it ({check.__name__})", value,
                                frozenset(blamed))
    clobbered, passthrough = clobbered_args(text), returned_args(text)
    if bind is not None:
        from ..dialects.export_import import bind_parameters
        stages = stages[:-1] + (replace(stages[-1], text=bind_parameters(text, *bind)),)
    return CompiledGraph(compile_stages(stages, target, config), clobbered, passthrough)


def compile_graph(graph, target: Target, config: PipelineConfig, *,
                  stages: tuple[Stage, ...] | None = None,
                  fallback: bool = True, compiler=None, gm=None) -> CompiledGraph | EagerEntry:
    """The one compile path of a captured ``graph`` (``program.Graph``):
    ``lower_graph`` (unless its ``stages`` for ``target`` are given), then
    ``compile_module``. With ``fallback`` a graph that fails to lower or
    compile, or that IREE would miscompile, becomes an ``EagerEntry`` (never
    an exception from the pipeline) and the ops blamed for a failure are no
    longer captured for compilation; without, the ``PipelineError`` is raised
    and nothing is denied. Adds one ``CompileTime`` sample.

    ``compiler(gm, target, config)``: does both steps elsewhere (a compile
    worker, ``runtime.compile_pool``) and returns the ``CompiledGraph`` or
    raises the ``PipelineError``; ``gm``: the graph's fx module, if made."""
    if gm is None and (stages is None or fallback):  # to lower, or to run eagerly
        gm = to_fx(graph)
    t0 = time.perf_counter()
    try:
        if stages is None and compiler is not None:
            return compiler(gm, target, config)
        if stages is None:
            stages = lower_graph(graph, target, config, gm)
        return compile_module(stages, target, config)
    except InPlaceHazard as e:
        if not fallback:
            raise
        ops = sorted(_op_names(graph) & e.blamed)
        log.warning("%s; the graph runs eagerly on the CPU", e)
        return EagerEntry(gm, ops or [_base_name(graph.nodes[-1].op)])
    except PipelineError as e:
        if not fallback:
            raise
        ops = list(e.unlowered)
        _deny(graph, ops, f"compile failed: {e}")
        log.warning("%s\n  the graph runs eagerly on the CPU%s", e,
                    f"; not compiled again for these argument dtypes and ranks: {', '.join(ops)}"
                    if ops else "")
        return EagerEntry(gm, sorted({o.split(".")[0] for o in ops})
                          or [_base_name(n.op) for n in graph.nodes])
    finally:
        metrics.add_sample("CompileTime", time.perf_counter() - t0)


def eager_entry(graph) -> EagerEntry:
    """``graph`` run eagerly, every op of it blamed (a module the runtime
    cannot load)."""
    return EagerEntry(to_fx(graph), [_base_name(n.op) for n in graph.nodes])


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
