"""The one compile path: a captured graph, a target and a config -> a module.

``compile_graph`` is what the compile service
(``compile_service.lookup.executable_for``: mark_step, the Dynamo backend)
and ``lm.jit`` call; it is built from two stage-level pieces that the callers
without a captured graph use directly (export, the
``lazy-mlir compile`` command):

- ``lower_graph``: the graph's fx module lowered for ``target`` (the target's
  rewrites: im2col/channels-last convolutions on cpu, ...);
- ``compile_module``: the lowered stages -> a ``CompiledGraph``: the iree
  flags of the target and config, the arguments the runtime must copy or
  pass through (``in_place``), and the in-place hazards IREE would compute
  wrongly (raised as ``PipelineError`` before anything is compiled).

A failure raises (``PipelineError``, ``InPlaceHazard`` with the ops it
blames): running the graph eagerly instead is the compile service's policy
(``compile_service.executable``). Nothing here loads a module.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from .. import metrics
from ..config import PipelineConfig
from ..dialects.runner import PipelineError
from ..targets import Target
from .fx_graph import to_fx
from .in_place import (argument_read_after_in_place_write, barrier_results, clobbered_args,
                       folded_into_written, returned_args, shared_sort_operands,
                       unshare_sort_operands, writes_into_args)
from .stages import (SYMBOLIC_MARK, Compiled, Stage, compile_stages, iree_phase,
                     linalg_for_checks, lower)

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
    if stages[-1].name == "torch-backend" and SYMBOLIC_MARK in text:
        return _compile_symbolic(stages, target, config, bind)
    unshared = unshare_sort_operands(text)
    if unshared is not text:
        text = unshared
        stages = stages[:-1] + (replace(stages[-1], text=text),)
    _refuse_hazards(text)
    clobbered, passthrough = clobbered_args(text), returned_args(text)
    stages = _keep_results_out_of_writes(stages, passthrough, target, config)
    text = stages[-1].text
    if bind is not None:
        from ..dialects.export_import import bind_parameters
        stages = stages[:-1] + (replace(stages[-1], text=bind_parameters(text, *bind)),)
    return CompiledGraph(compile_stages(stages, target, config), clobbered, passthrough)


def _keep_results_out_of_writes(stages: tuple[Stage, ...], passthrough, target: Target,
                                config: PipelineConfig) -> tuple[Stage, ...]:
    """``stages`` with the results IREE would return in an argument's buffer
    that it also writes in place (``in_place.folded_into_written``) passed
    through a barrier (``in_place.barrier_results``), read from IREE's
    stream phase: a second, partial compile, of a module whose in-place ops
    may write into an argument only (``in_place.writes_into_args``). Raises
    ``InPlaceHazard`` where the barriers do not keep them out (checked again)."""
    text = stages[-1].text
    written = writes_into_args(text)
    if not written:
        return stages
    unchanged = {k for k, _ in passthrough}  # (answered with the argument itself)
    for attempt in range(2):
        stream = iree_phase(stages, "stream", target, config, elide=True).text
        folded = tuple(k for k in folded_into_written(stream, written) if k not in unchanged)
        if not folded:
            return stages
        edited = barrier_results(text, folded) if attempt == 0 else None
        if edited is None:
            raise InPlaceHazard(f"lazy-mlir: IREE writes argument(s) {list(written)} in place "
                                f"and returns results {list(folded)} in their buffers",
                                f"results {list(folded)}", frozenset(_IN_PLACE_LIKE))
        text = edited
        last = stages[-1]
        built_by = f"{last.provenance.built_by} + kept_results ({len(folded)} results)"
        stages = stages[:-1] + (replace(last, text=text, provenance=replace(
            last.provenance, built_by=built_by)),)
    return stages


def _refuse_hazards(text: str) -> None:
    """Raises ``InPlaceHazard`` where IREE would update a value in place
    while another result of ``text``'s module still reads it."""
    for check, blamed in _HAZARDS:
        value = check(text)
        if value:
            raise InPlaceHazard(f"lazy-mlir: IREE updates {value} in place while another "
                                f"result still reads it ({check.__name__})", value,
                                frozenset(blamed))


def _compile_symbolic(stages: tuple[Stage, ...], target: Target,
                      config: PipelineConfig, bind=None) -> CompiledGraph:
    """A module with dynamic dimensions (``size_family``), compiled from its
    torch-backend stage by IREE's torch input; its protections read from
    torch-mlir's linalg of the same module without its shape facts
    (``linalg_for_checks``: what IREE writes in place does not depend on
    sizes)."""
    checked = linalg_for_checks(stages[-1].text, config)
    _refuse_hazards(checked)
    if unshare_sort_operands(checked) is not checked:
        raise PipelineError("lazy-mlir: two sorts of one operand in a module with dynamic "
                            "dimensions (compiled per size instead)", None)
    if bind is not None:  # (export: its weights as IREE parameters)
        from ..dialects.export_import import bind_parameters
        stages = stages[:-1] + (replace(stages[-1], text=bind_parameters(
            stages[-1].text, *bind)),)
    return CompiledGraph(compile_stages(stages, target, config), clobbered_args(checked),
                         returned_args(checked))


def compile_graph(graph, target: Target, config: PipelineConfig, *,
                  stages: tuple[Stage, ...] | None = None, compiler=None,
                  gm=None) -> CompiledGraph:
    """The one compile path of a captured ``graph`` (``program.Graph``):
    ``lower_graph`` (unless its ``stages`` for ``target`` are given), then
    ``compile_module``. Raises the ``PipelineError`` of a graph that fails
    to lower or compile, or ``InPlaceHazard`` for one IREE would miscompile
    (what that means for the caller is the compile service's to decide:
    ``compile_service.executable.compile_or_fallback``). Adds one
    ``CompileTime`` sample.

    ``compiler(gm, target, config)``: does both steps elsewhere (a compile
    worker, ``compile_service.compile_pool``) and returns the
    ``CompiledGraph`` or raises the ``PipelineError``; ``gm``: the graph's fx
    module, if made."""
    t0 = time.perf_counter()
    try:
        if stages is None and compiler is not None:
            return compiler(to_fx(graph) if gm is None else gm, target, config)
        if stages is None:
            stages = lower_graph(graph, target, config, gm)
        return compile_module(stages, target, config)
    finally:
        metrics.add_sample("CompileTime", time.perf_counter() - t0)


