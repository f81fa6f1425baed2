"""Stages of a compile, each immutable, each with ``.as_text()``.

``Captured`` (fx) -> ``Imported`` (torch dialect) -> ``Lowered`` (torch
backend contract, then linalg) -> ``Compiled`` (vmfb). Each stage records
what made it and how long it took, like lightning-thunder's traces.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch.fx as fx

from ..passes import pipelines
from ..passes.runner import PipelineError, run_pipeline, write_repro
from .targets import Target


@dataclass(frozen=True)
class Provenance:
    built_by: str
    seconds: float


@dataclass(frozen=True)
class Stage:
    name: str
    text: str
    provenance: Provenance

    def as_text(self) -> str:
        return self.text


@dataclass(frozen=True)
class Compiled:
    vmfb: bytes
    target: Target
    stages: tuple[Stage, ...] = field(default=())

    @property
    def artifact(self) -> bytes:
        return self.vmfb


def _timed(name: str, built_by: str, fn, *args) -> Stage:
    t0 = time.perf_counter()
    text = fn(*args)
    return Stage(name, text, Provenance(built_by, time.perf_counter() - t0))


def lower(gm: fx.GraphModule) -> tuple[Stage, ...]:
    """fx -> decomposed fx -> torch -> torch-backend -> linalg."""
    from ..dialects.torch_import import import_fx
    from .fx_graph import decompose
    t0 = time.perf_counter()
    gm = decompose(gm)
    fx_stage = Stage("fx", gm.print_readable(print_output=False),
                     Provenance("lazy capture + torch-mlir decomposition table",
                                time.perf_counter() - t0))
    torch_stage = _timed("torch", "torch-mlir FxImporter", lambda: str(import_fx(gm)))
    backend = _timed("torch-backend", "torch-mlir " + ",".join(pipelines.TORCH_BACKEND),
                     run_pipeline, torch_stage.text,
                     pipelines.as_pipeline(pipelines.TORCH_BACKEND), "torch-backend")
    linalg = _timed("linalg", "torch-mlir " + ",".join(pipelines.LINALG), run_pipeline,
                    backend.text, pipelines.as_pipeline(pipelines.LINALG), "linalg")
    return fx_stage, torch_stage, backend, linalg


def compile_linalg(stages: tuple[Stage, ...], target: Target) -> Compiled:
    import iree.compiler as ic
    linalg = stages[-1].text
    flags = [f"--iree-hal-target-backends={target.backend}", *target.flags]
    t0 = time.perf_counter()
    try:
        vmfb = ic.compile_str(linalg, target_backends=[target.backend],
                              extra_args=list(target.flags))
    except ic.CompilerToolError as e:
        d = write_repro(linalg, "iree-compile linalg.mlir " + " ".join(flags) + " -o out.vmfb",
                        str(e), "linalg")
        raise PipelineError(f"lazy-mlir: iree-compile failed for target {target.name}: "
                            f"{_first_error(str(e))}\n  repro: {d}/linalg.mlir, run "
                            f"{d}/command.sh", d) from None
    stage = Stage("vmfb", f"<{len(vmfb)} bytes>",
                  Provenance("iree-compile " + " ".join(flags), time.perf_counter() - t0))
    return Compiled(vmfb, target, stages + (stage,))


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    return text.strip().splitlines()[0] if text.strip() else "unknown error"
