"""Stages of a compile, each immutable, each with ``.as_text()``.

fx -> torch (FxImporter) -> torch-backend -> linalg -> vmfb, driven by a
``PipelineConfig``. Each stage records what made it and how long it took,
like lightning-thunder's traces. With ``input = "torch"`` the torch dialect
goes straight to IREE's own torch input conversion instead.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import torch.fx as fx

from ..passes import pipelines
from ..passes.complex_as_real import complex_as_real
from ..dialects.runner import PipelineError, run_pipeline, write_repro
from ..config import PipelineConfig
from .contractions import largest_matmul
from ..targets import (F32_STATISTICS_TARGETS, LARGE_MATMUL_MACS, WIDE_SUM_TARGETS, Target,
                       narrows_int64)

log = logging.getLogger("lazy_mlir")

# IREE's compilation phases, in order (iree-compile --compile-to=<phase>).
IREE_PHASES = ("input", "abi", "preprocessing", "global-optimization", "dispatch-creation",
               "flow", "stream", "executable-sources", "executable-targets", "hal", "vm")


@dataclass(frozen=True)
class Provenance:
    built_by: str
    seconds: float


@dataclass(frozen=True)
class Stage:
    name: str
    text: str
    provenance: Provenance
    matmul_macs: int | None = None  # (dynamic sizes: the largest matmul at the plan's sizes)

    def as_text(self) -> str:
        return self.text


@dataclass(frozen=True)
class Compiled:
    vmfb: bytes
    target: Target
    flags: tuple[str, ...]
    stages: tuple[Stage, ...] = field(default=())

    @property
    def artifact(self) -> bytes:
        return self.vmfb


def _timed(name: str, built_by: str, fn, *args) -> Stage:
    t0 = time.perf_counter()
    text = fn(*args)
    return Stage(name, text, Provenance(built_by, time.perf_counter() - t0))


def lower(gm: fx.GraphModule, config: PipelineConfig,
          target: str | None = None) -> tuple[Stage, ...]:
    """fx -> (decomposed, mixed-precision) fx -> torch [-> torch-backend -> linalg].
    ``target`` (a target name, if known) selects target-dependent rewrites."""
    from ..passes.bool_compare import bool_compare_as_promoted
    from ..passes.float_eq import float_eq_as_not_ne
    from ..passes.float_scalars import int_scalars_as_float
    from ..passes.normalize_dims import normalize_dims
    from ..passes.whole_sums import whole_sums_in_two_steps
    from ..ops.offsets import expand_runtime_offsets
    from .fx_graph import decompose
    t0 = time.perf_counter()
    made_by = ["lazy capture"]
    plan = gm.meta.get("size_plan")
    if plan is not None:  # one module for a family of sizes (pipeline/size_family.py)
        from .contractions import largest_fx_matmul
        from .size_family import SizeSpecialized, symbolic_module
        planned_macs = largest_fx_matmul(gm)  # (``gm``: the graph at the plan's sizes)
        try:
            gm = symbolic_module(gm, plan)
        except SizeSpecialized as e:
            raise PipelineError(f"lazy-mlir: no module with dynamic dimensions: {e}",
                                None) from None
        made_by.append("dynamic dimensions")
    real = complex_as_real(gm)  # (complex rotary embeddings: before any table sees one)
    if real is not gm:
        gm = real
        made_by.append("complex_as_real")
    extra = {}
    direct = config.direct_convs(target)
    if config.conv_as_matmul(target) and plan is None:  # (its decompositions fix a
        # symbolic batch: LeNet's module of a plan computed batch 4 for batch 5)
        from ..passes.conv_matmul import decompositions
        from ..passes.pool_elementwise import DECOMPOSITIONS as pool
        extra = {**decompositions(direct=direct, split_k=target == "cpu"), **pool}
    conv_rewrites = bool(extra)
    from ..passes.variance_f32 import LAYER_NORM
    extra = {**extra, **LAYER_NORM}  # float32 statistics, as eager's kernel
    if target in F32_STATISTICS_TARGETS:  # no float64 var/std in float32 graphs
        from ..passes.variance_f32 import DECOMPOSITIONS as f32_statistics
        extra = {**extra, **f32_statistics}
        made_by.append("variance_f32")
    calls = plan is None  # (IREE's torch input, which compiles a dynamic one, takes no call)
    if calls and config.rnn_as_calls(target):  # LSTMs as oneDNN calls (host_calls/passes/rnn.py)
        from ..host_calls.passes.rnn import decompositions as host_rnn
        extra = {**extra, **host_rnn()}
        made_by.append("host_rnn")
    if calls and config.attention_as_calls(target):  # (host_calls/passes/attention.py)
        from ..host_calls.passes.attention import decompositions as host_attention
        extra = {**extra, **host_attention()}
        made_by.append("host_attention")
    if config.decompositions or extra:
        gm = decompose(gm, extra, base=config.decompositions)
        if config.decompositions:
            made_by.append("torch-mlir decomposition table")
        if plan is not None:
            from .size_family import still_symbolic
            try:
                still_symbolic(gm)
            except SizeSpecialized as e:
                raise PipelineError(f"lazy-mlir: no module with dynamic dimensions: {e}",
                                    None) from None
        if conv_rewrites:
            from ..passes.channels_last_pointwise import channels_last_pointwise
            gm = channels_last_pointwise(gm)
            made_by.append("conv_matmul + pool_elementwise + channels_last_pointwise")
    gm = float_eq_as_not_ne(normalize_dims(expand_runtime_offsets(gm)))
    gm = whole_sums_in_two_steps(int_scalars_as_float(bool_compare_as_promoted(gm)))
    if config.mixed_precision == "bf16":
        from ..passes.mixed_precision import bf16_mixed_precision
        gm = bf16_mixed_precision(gm)
        made_by.append("bf16_mixed_precision")
    if target in WIDE_SUM_TARGETS:  # few push constants per dispatch
        from ..passes.wide_sums import wide_sums_as_stack
        gm = wide_sums_as_stack(gm)
        made_by.append("wide_sums_as_stack")
    if target is not None and narrows_int64(target):
        from ..passes.int64_range import int64_overflow_reason
        why = int64_overflow_reason(gm)
        if why:
            raise PipelineError(f"lazy-mlir: the {target} target holds int64 as int32, and {why}"
                                " (LAZY_MLIR_VULKAN_INT64=1 keeps 64 bits)", None)
        made_by.append("int64_range")
    if plan is not None:  # (``(t**2)//t`` of a split view: FxImporter takes no division)
        from .size_family import exact_floor_divisions
        if exact_floor_divisions(gm):
            made_by.append("exact_floor_divisions")
    fx_stage = Stage("fx", gm.print_readable(print_output=False),
                     Provenance(" + ".join(made_by), time.perf_counter() - t0))
    torch_stage = _timed("torch", "torch-mlir FxImporter", lambda: str(_imported(
        gm, config, target if calls else None)))
    if config.input == "torch":
        return fx_stage, torch_stage
    if plan is not None:  # IREE's torch input: torch-mlir's linalg mislowers views of them
        torch_stage, backend = lower_torch(torch_stage, config, target, to="torch-backend")
        return fx_stage, torch_stage, replace(backend, matmul_macs=planned_macs)
    return (fx_stage,) + lower_torch(torch_stage, config, target)


def _imported(gm: fx.GraphModule, config: PipelineConfig, target: str | None):
    from ..dialects.torch_import import import_fx
    module = import_fx(gm)
    if config.rnn_as_calls(target):
        from ..host_calls.passes.rnn import calls_instead
        calls_instead(module)
    if config.attention_as_calls(target):
        from ..host_calls.passes.attention import calls_instead as attention_calls
        attention_calls(module)
    return module


def lower_torch(torch_stage: Stage, config: PipelineConfig, target: str | None = None,
                to: str = "linalg") -> tuple[Stage, ...]:
    """torch dialect -> torch-backend [-> linalg] (``to``), with ``target``'s
    linalg rewrites (``view.dtype`` as a bitcast: ``passes/bitcast.py``).
    ``lower``'s part after the import,
    and ``lazy-mlir compile --from torch``'s whole lowering."""
    backend_passes = pipelines.torch_backend(config)
    backend = _timed("torch-backend", "torch-mlir " + ",".join(backend_passes), run_pipeline,
                     torch_stage.text, pipelines.as_pipeline(backend_passes), "torch-backend")
    if to == "torch-backend":
        return torch_stage, backend
    source, bitcasts = backend.text, None
    if "torch.aten.view.dtype" in source:  # no linalg lowering: calls, bitcasts after
        from ..passes.bitcast import view_dtype_as_calls
        bitcasts = view_dtype_as_calls(source)
        source = bitcasts or source
    linalg_passes = pipelines.linalg(config)
    edits = _linalg_edits(config, target)
    pipeline = pipelines.as_pipeline(linalg_passes)
    from ..dialects.torch_calls import contract_violation, without_contract_check
    from ..host_calls.passes import attention as host_attention, rnn as host_rnn
    calls = [(name, mark) for name, mark in (("host_rnn", host_rnn.CALL_MARK), (
        "host_attention", host_attention.CALL_MARK)) if mark in backend.text]
    if calls or bitcasts:  # (its contract check refuses the calls)
        pipeline = without_contract_check(pipeline)
    linalg = _timed("linalg", "torch-mlir " + ",".join(linalg_passes), run_pipeline,
                    source, pipeline, "linalg", _chained(edits) if edits else None)
    if calls or bitcasts:
        why = contract_violation(linalg.text)
        if why:
            raise PipelineError(f"lazy-mlir: the linalg pipeline failed: {why}", None)
    if bitcasts:
        from ..passes.bitcast import calls_as_bitcasts
        linalg = _noted(replace(linalg, text=calls_as_bitcasts(linalg.text)), "view_dtype_as_bitcast")
    for name, mark in calls:
        linalg = _noted(linalg, f"{name} ({linalg.text.count(mark)} calls)")
    for what, mark, _, unit in edits:
        rewritten = mark(linalg.text) if callable(mark) else linalg.text.count(mark)
        if rewritten:
            linalg = _noted(linalg, f"{what} ({rewritten} {unit})")
    return torch_stage, backend, linalg


SYMBOLIC_MARK = "torch.bind_symbolic_shape"


def linalg_for_checks(torch_backend_text: str, config: PipelineConfig) -> str:
    """torch-mlir's linalg of a module with dynamic dimensions, its shape
    facts (``torch.symbolic_int``, ``torch.bind_symbolic_shape``, which
    torch-mlir's linalg pipeline does not take) dropped: for the in-place
    checks only (it collapses a view of two dynamic dimensions wrongly; IREE's
    torch input compiles the module)."""
    import re
    text = re.sub(r"^.*torch\.(?:symbolic_int|bind_symbolic_shape).*\n", "",
                  torch_backend_text, flags=re.M)
    pipeline = pipelines.as_pipeline(pipelines.linalg(config))
    if "torch.aten.view.dtype" in text:  # (no linalg lowering: calls; IREE's input takes them)
        from ..passes.bitcast import view_dtype_as_calls
        from ..dialects.torch_calls import without_contract_check
        text, pipeline = view_dtype_as_calls(text) or text, without_contract_check(pipeline)
    return run_pipeline(text, pipeline, "linalg")


def _linalg_edits(config: PipelineConfig, target: str | None) -> list[tuple]:
    """(name, how a rewrite reads in the text (or a function counting it there),
    edit, what it rewrites) of the project's linalg-stage passes for ``target``,
    in order: the large matmuls become calls before ``data_tiling`` decides
    which of the others keep data tiling."""
    edits = []
    if config.direct_convs(target):
        from ..passes.conv_channels_last import CALL_PREFIX, to_channels_last
        edits.append(("conv_channels_last", CALL_PREFIX, to_channels_last, "convolutions"))
    if config.matmuls_as_calls(target):
        from ..host_calls.passes.blas import CALL_PREFIX as BLAS_PREFIX, matmuls_as_calls
        edits.append(("host_blas", BLAS_PREFIX, matmuls_as_calls, "matmuls"))
    if target == "cpu":
        from ..passes.bf16_casts import bf16_conversions_in_integers, count_in as bf16_casts
        edits.append(("bf16_casts", bf16_casts, bf16_conversions_in_integers, "bf16 conversions"))
        from ..passes.data_tiling import HINT, choose_tiled_matmuls
        edits.append(("data_tiling", HINT, choose_tiled_matmuls, "matmuls kept tiled"))
        from ..passes.strided_transposes import count_in, unfuse_strided_transposes
        edits.append(("strided_transposes", count_in, unfuse_strided_transposes,
                      "transposes unfused"))
        from ..passes.column_sums import CALL_PREFIX as SUMS, column_sums_in_two_stages
        edits.append(("column_sums", SUMS, column_sums_in_two_stages, "column sums"))
    from ..passes.f64_constants import count_in as f64_truncs, fold_truncated_f64_constants
    edits.append(("f64_constants", f64_truncs, fold_truncated_f64_constants,
                  "f64 constants made f32"))
    from ..passes.self_inserts import copy_self_inserts, count_in as self_inserts
    edits.append(("self_inserts", self_inserts, copy_self_inserts, "self-overlapping slices copied"))
    from ..passes.returned_views import copy_returned_views, count_in as returned_views
    edits.append(("returned_views", returned_views, copy_returned_views,
                  "returned views of written arguments copied"))
    from ..passes.unit_strides import MARK as UNIT_STRIDES, unit_strides
    edits.append(("unit_strides", UNIT_STRIDES, unit_strides, "unit-size slices stepped by 1"))
    from ..passes.element_slices import MARK as ELEMENTS, fill_reshaped_elements
    edits.append(("element_slices", ELEMENTS, fill_reshaped_elements,
                  "one-element slices read as fills"))
    from ..passes.gather_sources import barrier_gather_sources, count_in as gather_sources
    edits.append(("gather_sources", gather_sources, barrier_gather_sources,
                  "gathered slices materialized"))
    from ..passes.returned_bool_bytes import MARK as BOOL_BYTES, bool_bytes_apart
    edits.append(("returned_bool_bytes", BOOL_BYTES, bool_bytes_apart, "bool conversions apart"))
    from ..passes.scatter_destinations import MARK as OWN, own_destinations
    edits.append(("scatter_destinations", OWN, own_destinations, "scatter destinations copied"))
    from ..passes.scalar_dispatches import bound_scalar_dispatches, count_in as scalar_cuts
    edits.append(("scalar_dispatches", scalar_cuts, bound_scalar_dispatches, "scalar values cut"))
    return edits


def _chained(edits: list[tuple]):
    if len(edits) == 1:
        return edits[0][2]

    def chained(module):
        for _, _, edit, _ in edits:
            edit(module)
    chained.__module__ = __name__
    chained.__name__ = "+".join(e[2].__name__ for e in edits)
    return chained


def _noted(stage: Stage, step: str) -> Stage:
    """``stage`` with one more project step named in its provenance."""
    return replace(stage, provenance=replace(stage.provenance,
                                             built_by=f"{stage.provenance.built_by} + {step}"))


QUIET_EMPTY_READS = "--iree-global-opt-enable-warn-on-uninitialized-values=false"
"""iree-compile warns (on the user's stderr, with the whole function's
signature) where an op reads a ``tensor.empty``: ``torch.empty``/``empty_like``
filled in place later (MoE routing's ``empty_like`` then ``index_put_``), which
reads uninitialized memory eagerly too. The program's choice, not ours."""


def iree_flags(target: Target, config: PipelineConfig, stages: tuple[Stage, ...]) -> list[str]:
    """The iree-compile flags for the last of ``stages``. The target's
    ``large_matmul_flags`` are dropped from a linalg graph without a matmul
    of ``LARGE_MATMUL_MACS`` unless the configuration names them."""
    own = config.flags_for(target.name)
    flags = [f"--iree-hal-target-backends={target.backend}", *target.flags, QUIET_EMPTY_READS]
    flags += [f for f in own if f not in flags]
    if _small_graph(target, stages) is not None:
        drop = set(target.large_matmul_flags) - set(own)
        flags = [f for f in flags if f not in drop]
    if config.opt_level is not None:
        flags.append(f"--iree-opt-level=O{config.opt_level}")
    if config.input == "torch" or _torch_input(stages):
        flags.append("--iree-input-type=torch")
    from .libm_calls import link_flags
    flags += [f for f in link_flags(target.backend, stages[-1].text) if f not in flags]
    return flags


def _small_graph(target: Target, stages: tuple[Stage, ...]) -> int | None:
    """The largest matmul of a linalg graph (of a module with dynamic sizes,
    at its plan's sizes) too small for the target's ``large_matmul_flags``
    (None when the rule does not apply)."""
    if not target.large_matmul_flags:
        return None
    if stages[-1].name == "linalg":
        largest = largest_matmul(stages[-1].text)
    elif stages[-1].matmul_macs is not None:  # (dynamic sizes: at the plan's sizes)
        largest = stages[-1].matmul_macs
    else:
        return None
    return largest if largest < LARGE_MATMUL_MACS else None


def _torch_input(stages: tuple[Stage, ...]) -> bool:
    return stages[-1].name in ("torch", "torch-backend")


def _iree_compile(text: str, flags: list[str], what: str, target: Target) -> bytes:
    import iree.compiler as ic
    try:
        return ic.compile_str(text, extra_args=flags)
    except ic.CompilerToolError as e:
        d = write_repro(text, "iree-compile input.mlir " + " ".join(flags) + " -o out." + what,
                        str(e), "input")
        raise PipelineError(f"lazy-mlir: iree-compile failed for target {target.name}: "
                            f"{_first_error(str(e))}\n  repro: {d}/input.mlir, run "
                            f"{d}/command.sh", d) from None


def compile_stages(stages: tuple[Stage, ...], target: Target,
                   config: PipelineConfig) -> Compiled:
    """The last stage (linalg, or torch for IREE's torch input) -> vmfb."""
    flags = iree_flags(target, config, stages)
    t0 = time.perf_counter()
    try:
        vmfb = _iree_compile(stages[-1].text, flags, "vmfb", target)
    except PipelineError as e:
        plain = [f for f in flags if f not in target.optional_flags]
        if len(plain) == len(flags):
            raise
        log.warning("%s\n  compiling it again without %s", e, " ".join(target.optional_flags))
        flags = plain
        vmfb = _iree_compile(stages[-1].text, flags, "vmfb", target)
    stage = Stage("vmfb", f"<{len(vmfb)} bytes>",
                  Provenance("iree-compile " + " ".join(flags) + _without(target, flags, stages),
                             time.perf_counter() - t0))
    return Compiled(vmfb, target, tuple(flags), stages + (stage,))


def _without(target: Target, flags: list[str], stages: tuple[Stage, ...]) -> str:
    """Why the target's large-matmul flags are missing, if they are."""
    missing = [f for f in target.large_matmul_flags if f not in flags]
    largest = _small_graph(target, stages) if missing else None
    if largest is None:  # all there, or dropped because they failed to compile
        return ""
    return (f" (without {' '.join(missing)}: largest matmul {largest:,} multiply-adds, "
            f"under {LARGE_MATMUL_MACS:,})")


def iree_phase(stages: tuple[Stage, ...], phase: str, target: Target,
               config: PipelineConfig, elide: bool = False) -> Stage:
    """The IR after one of IREE's phases (``--compile-to``), as text
    (``elide``: large constants elided, to be read, not compiled)."""
    if phase not in IREE_PHASES:
        raise ValueError(f"unknown IREE phase {phase!r}; phases: {', '.join(IREE_PHASES)}")
    flags = iree_flags(target, config, stages) + [f"--compile-to={phase}", "--output-format=vm-asm"
                                          if phase == "vm" else "--mlir-print-debuginfo=false"]
    if elide:
        flags.append("--mlir-elide-elementsattrs-if-larger=16")
    t0 = time.perf_counter()
    out = _iree_compile(stages[-1].text, flags, phase + ".mlir", target)
    return Stage("iree-" + phase, out.decode(),
                 Provenance("iree-compile " + " ".join(flags), time.perf_counter() - t0))


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
