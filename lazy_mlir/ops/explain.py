"""``explain_op(op, target)``: how one aten op reaches the compiler.

The answer is read from the same tables the pipeline uses (``support.py``,
``registry.py``), so it cannot drift from them: the torch dialect's op list,
the denied ops (static and added at run time), the CAPTURE, IMPORT and
TARGET registrations, and PyTorch's and torch-mlir's own tables below ours.
What depends on the call's arguments is given as a note, not a verdict: an
unsupported dtype (complex but for passes/complex_as_real's ops, quantized,
float8) falls back per call, a capture-time decomposition is used only where
its trace compiles, and a decomposition may decline some arguments
(``NotImplemented``).

TARGET registrations live in ``passes/`` and exist once it is imported
(``lm.debug.explain_op`` and ``lazy-mlir explain-op`` import it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..config import PipelineConfig
from ..dialects.torch_ops import torch_mlir_decompositions
from . import registry, support

COMPILED = "compiled directly"
CAPTURE_DECOMPOSED = "decomposed at capture time"
IMPORT_DECOMPOSED = "decomposed before import"
TARGET_REWRITTEN = "rewritten by a target pass"
FALLS_BACK = "falls back to eager"


@dataclass(frozen=True)
class OpExplanation:
    """How ``op`` reaches the compiler on ``target``: a ``verdict`` (one of
    the five constants above) and the steps that lead to it, each
    ``(stage, where)`` with ``where`` a file and function."""

    op: str
    target: str
    verdict: str
    in_dialect: bool
    steps: tuple[tuple[str, str], ...] = ()
    denied: str | None = None
    notes: tuple[str, ...] = field(default=())

    def __str__(self) -> str:
        lines = [f"{self.op} on {self.target}: {self.verdict}",
                 f"  torch dialect: {'has' if self.in_dialect else 'lacks'} "
                 f"torch.aten.{self.op.removeprefix('aten.').removesuffix('.default')}"]
        if self.denied:
            lines.append(f"  denied: {self.denied}")
        lines += [f"  {stage}: {where}" for stage, where in self.steps]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def resolve(op) -> torch._ops.OpOverload:
    """``aten.add.Tensor``, its packet (``.default``), or the strings
    ``"aten.add.Tensor"``/``"aten.add"``/``"add.Tensor"``."""
    if isinstance(op, str):
        parts = op.removeprefix("aten.").split(".")
        if not parts[0] or len(parts) > 2 or not hasattr(torch.ops.aten, parts[0]):
            raise ValueError(f"not an aten op: {op!r}")
        op = getattr(torch.ops.aten, parts[0])
        if len(parts) == 2:
            if parts[1] not in op.overloads():
                raise ValueError(f"aten.{parts[0]} has no overload {parts[1]!r} "
                                 f"(it has {', '.join(op.overloads())})")
            return getattr(op, parts[1])
    if isinstance(op, torch._ops.OpOverloadPacket):
        names = op.overloads()
        return getattr(op, "default" if "default" in names else names[0])
    if isinstance(op, torch._ops.OpOverload):
        return op
    raise ValueError(f"not an aten op: {op!r}")


def _stack(op, scope) -> str | None:
    """Our registrations of ``op`` in ``scope``, a chained one shown as
    wrapping the one below it."""
    regs = registry.registrations(op, scope)
    if not regs:
        return None
    text = regs[0].where
    for r in regs[1:]:
        text = f"{r.where} (wrapping {text})" if r.chained else r.where
    return text


def _upstream(fn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _runs_on_host(func) -> str | None:
    """Why every call of ``func`` runs eagerly whatever the tables say, if it
    does: its output shape depends on the data (``nonzero``, ``masked_select``:
    capture's shape inference raises for them), or it returns no tensor (``item``,
    ``equal``: a sync point that reads the data on the host)."""
    if torch.Tag.dynamic_output_shape in func.tags:
        return "its output shape depends on the data (it runs eagerly on the CPU)"
    if not any("Tensor" in str(r.type) for r in func._schema.returns):
        return "it returns no tensor: a sync point, run on the host with the data read back"
    return None


def explain_op(op, target: str = "cpu", config: PipelineConfig | None = None) -> OpExplanation:
    """How ``op`` (see ``resolve``) reaches the compiler on ``target`` under
    ``config`` (default: ``PipelineConfig()``), as of now in this process
    (ops denied at run time included)."""
    func = resolve(op)
    config = config or PipelineConfig()
    name = support.mlir_name(func)
    in_dialect = name in support.dialect_ops()
    denied = support.DENIED.get(name)
    steps, notes = [], []
    host = _runs_on_host(func)
    if host:
        return OpExplanation(f"aten.{func.__name__}", target, FALLS_BACK, in_dialect,
                             (("eagerly, every call", host),))
    if support.op_is_supported(func):
        verdict = COMPILED
        ours = _stack(func, registry.IMPORT) if config.decompositions else None
        theirs = torch_mlir_decompositions().get(func) if config.decompositions else None
        if ours:
            verdict = IMPORT_DECOMPOSED
            steps.append(("before import", ours))
        elif theirs is not None:
            verdict = IMPORT_DECOMPOSED
            steps.append(("before import", f"torch-mlir's table: {_upstream(theirs)}"))
        if ours or theirs is not None:
            notes.append("a decomposition may decline some arguments (NotImplemented): "
                         "those keep the op")
    else:
        verdict = FALLS_BACK
        ours = _stack(func, registry.CAPTURE)
        theirs = support.capture_decompositions().get(func)
        if ours or theirs is not None:
            verdict = CAPTURE_DECOMPOSED
            steps.append(("at capture", ours or f"torch._decomp: {_upstream(theirs)}"))
            notes.append("used where its trace holds only compilable, non-random ops; "
                         "otherwise the call falls back")
        elif not denied:
            notes.append("not in the torch dialect and no decomposition")
    rewrite = _stack(func, registry.TARGET)
    if rewrite and verdict != FALLS_BACK:
        if config.conv_as_matmul(target):  # stages.lower: applied first, over the import table
            verdict = TARGET_REWRITTEN
            steps.insert(0, (f"target rewrite ({target})", rewrite))
            notes.append("the target rewrite runs first; where it declines, the "
                         "before-import decomposition (if any) applies")
        else:
            notes.append(f"{rewrite} rewrites it on targets where "
                         "PipelineConfig.conv_as_matmul holds (not here)")
    if support.DENIED_SIGNATURES.get(name):
        notes.append(f"{len(support.DENIED_SIGNATURES[name])} argument signature(s) denied "
                     "at run time fall back")
    notes.append("unsupported dtypes (complex but for passes/complex_as_real's ops, "
                 "quantized, float8) fall back per call; a failed compile denies the op for "
                 "its argument dtypes and ranks")
    return OpExplanation(f"aten.{func.__name__}", target, verdict, in_dialect, tuple(steps),
                         denied, tuple(notes))
