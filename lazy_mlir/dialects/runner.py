"""Apply a pass pipeline; on failure, leave a repro and say where it is."""
from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from .torch_import import parse


class PipelineError(RuntimeError):
    """A pass pipeline or iree-compile failed; ``repro`` is the directory."""

    def __init__(self, message: str, repro: Path | None, unlowered: tuple[str, ...] = ()):
        super().__init__(message)
        self.repro = repro
        self.unlowered = unlowered  # torch.aten ops left in the IR when it failed


def repro_dir() -> Path:
    root = os.environ.get("LAZY_MLIR_DUMP_DIR")
    base = Path(root) if root else Path(tempfile.gettempdir()) / "lazy-mlir-repro"
    base.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=base))


def write_repro(text: str, command: str, error: str, name: str) -> Path:
    d = repro_dir()
    (d / f"{name}.mlir").write_text(text)
    (d / "command.sh").write_text(f"#!/bin/sh\n{command}\n")
    (d / "error.txt").write_text(error)
    return d


def run_pipeline(module_text: str, pipeline: str, stage: str, edit=None) -> str:
    """Run ``pipeline`` (a ``builtin.module(...)`` string) on the IR text,
    then ``edit(module)``: a project pass that edits the module in place
    (``dialects/linalg_edit.py``)."""
    from torch_mlir.passmanager import PassManager
    module = parse(module_text)
    try:
        with module.context:
            pm = PassManager.parse(pipeline)
            module.context.enable_multithreading(False)
            pm.run(module.operation)
            if edit is not None:
                edit(module)
                module.operation.verify()
    except Exception as e:  # MLIR reports diagnostics in the exception text
        then = (f"\n# then lazy-mlir's {edit.__module__}.{edit.__name__} on the result"
                if edit else "")
        d = write_repro(module_text, f"torch-mlir-opt --pass-pipeline='{pipeline}' input.mlir"
                        + then, str(e), "input")
        left = _blame(module_text, str(e)) or tuple(sorted(set(re.findall(
            r"torch\.aten\.([A-Za-z0-9_.]+)", str(module)))))
        raise PipelineError(
            f"lazy-mlir: the {stage} pipeline failed: {_first_line(e)}\n"
            f"  repro: {d}/input.mlir, run {d}/command.sh", d, left) from None
    return str(module)


def _blame(text: str, error: str) -> tuple[str, ...]:
    """The torch.aten ops on the input lines the diagnostics point at."""
    lines = text.splitlines()
    ops = set(re.findall(r"torch\.aten\.([A-Za-z0-9_.]+)", error))
    for n in re.findall(r'"-":(\d+):\d+', error):
        if 0 < int(n) <= len(lines):
            ops.update(re.findall(r"torch\.aten\.([A-Za-z0-9_.]+)", lines[int(n) - 1]))
    return tuple(sorted(ops))


def _first_line(e: Exception) -> str:
    lines = [l for l in str(e).splitlines() if "error" in l.lower()] or str(e).splitlines() or [""]
    return lines[0].strip()


def pipeline_parse_error(pipeline: str) -> str | None:
    """Why MLIR's pass manager cannot parse ``pipeline`` (its first line), or None."""
    from torch_mlir.passmanager import PassManager

    from .torch_import import new_context
    with new_context():
        try:
            PassManager.parse(pipeline)
        except Exception as e:
            return str(e).strip().splitlines()[0]
    return None
