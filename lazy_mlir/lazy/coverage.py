"""Pre-flight coverage check: which ops of a program would fall back, found
before anything is compiled or run.

``check_coverage(fn, *args)`` runs ``fn`` once as a *dry run* on the lazy
device: ops are captured exactly as in a real run (same support table, same
decompositions), but an op that would fall back is recorded and replaced by a
stand-in node of the right shape, reads of values (``.item()``, ``.cpu()``,
``print``) return zeros, and ``mark_step`` compiles nothing. Afterwards every
tensor that existed before gets its value back; tensors made inside the dry
run (``.grad`` set by a backward, say) are poisoned: reading one raises.
"""
from __future__ import annotations

import concurrent.futures
import json
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_unflatten

from ..graph import argtree, debug
from .. import metrics
from ..graph.ir import DeviceData, TensorSpec, Value
from ..ops import support as _support
from .capture import _to_value, emit_flat
from .state import dry_run as _active  # the dry run in progress (state.py)
from .supported import UNSUPPORTED_DTYPES
from .sync import wait_device_ops
from .tensor import LazyTensor, live_storages, wrap_value


class DryRunStop(Exception):
    """Ends a dry run early (a data-dependent shape, or the step limit)."""


@dataclass
class OpUse:
    """One aten op of the program: how often it ran and whether it compiles."""

    op: str
    count: int = 0
    fallback: bool = False
    reason: str | None = None
    locations: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"op": self.op, "count": self.count, "fallback": self.fallback,
                "reason": self.reason, "locations": self.locations}


@dataclass
class CoverageReport:
    """What ``check_coverage`` found; ``ok`` when nothing would fall back."""

    ops: dict[str, OpUse] = field(default_factory=dict)
    syncs: dict[str, int] = field(default_factory=dict)  # "op at file:line" -> count
    steps: int = 0
    stopped: str | None = None

    @property
    def fallbacks(self) -> list[OpUse]:
        return sorted((u for u in self.ops.values() if u.fallback), key=lambda u: -u.count)

    @property
    def compiled(self) -> list[OpUse]:
        return sorted((u for u in self.ops.values() if not u.fallback), key=lambda u: u.op)

    @property
    def ok(self) -> bool:
        return not self.fallbacks and self.stopped is None

    def to_json(self) -> dict:
        return {"ok": self.ok, "steps": self.steps, "stopped": self.stopped,
                "fallbacks": [u.to_json() for u in self.fallbacks],
                "compiled": {u.op: u.count for u in self.compiled}, "syncs": self.syncs}

    def __str__(self) -> str:
        n = sum(u.count for u in self.compiled)
        lines = [f"lazy-mlir coverage: {len(self.compiled)} op(s) compile ({n} calls), "
                 f"{len(self.fallbacks)} would fall back"]
        for u in self.fallbacks:
            where = f" at {u.locations[0]}" if u.locations else ""
            lines.append(f"  aten::{u.op} x{u.count}{where}: {u.reason}")
        if self.stopped:
            lines.append(f"  stopped early: {self.stopped}")
        return "\n".join(lines)


class _DryRun:
    def __init__(self, max_steps: int | None):
        self.report = CoverageReport()
        self.max_steps = max_steps
        self.journal: dict = {}  # Storage -> its value before the dry run
        self.first_seq = next(live_storages._next)

    # -- hooks called by capture, fallback and sync
    def before_write(self, storage) -> None:
        if storage not in self.journal:
            self.journal[storage] = storage.value

    def stand_in(self, func, args, kwargs, why: str | None = None):
        """Record ``func`` as a fallback and return outputs of the right shape
        from a node that is never compiled."""
        name = func.__name__.split(".")[0]
        flat, tree = argtree.flatten(args, kwargs)
        vals = [_to_value(a, host_ok=True) for a in flat]
        use = self.report.ops.setdefault(name, OpUse(name))
        use.count += 1
        use.fallback = True
        use.reason = use.reason or why or _why(func, vals)
        where = debug.user_location()
        if where and where not in use.locations and len(use.locations) < 5:
            use.locations.append(where)
        try:
            outs, out_flat, out_tree = emit_flat(func, vals, tree)
        except Exception as e:  # noqa: BLE001 - meta cannot infer the shape
            raise DryRunStop(f"aten::{name} at {where or '?'} has an output shape that "
                             f"depends on the data ({type(e).__name__}); ops after it "
                             "were not checked") from None
        if func._schema.is_mutable and func._schema.returns and func._schema.returns[0].alias_info:
            return kwargs.get("out", args[0])
        it = iter(outs)
        result = [wrap_value(next(it)) if type(o) is TensorSpec else o for o in out_flat]
        return result[0] if out_tree is None else tree_unflatten(result, out_tree)

    def host_stand_in(self, t: torch.Tensor, what: str = "read") -> torch.Tensor:
        key = f"{what} at {debug.user_location() or '?'}"
        self.report.syncs[key] = self.report.syncs.get(key, 0) + 1
        return torch.zeros(t.shape, dtype=t.dtype)

    def on_mark_step(self) -> None:
        self.report.steps += 1
        if self.max_steps is not None and self.report.steps >= self.max_steps:
            raise DryRunStop(f"step limit ({self.max_steps} mark_step calls)")

    # -- undo
    def restore(self) -> None:
        for storage, value in self.journal.items():
            storage.value = value
            storage.version += 1  # views cached during the dry run must re-read
            if not value.pending:
                live_storages.discard(storage)
        dead = concurrent.futures.Future()
        dead.set_exception(RuntimeError(
            "lazy-mlir: this tensor was made inside lm.check_coverage (a dry run) and "
            "has no data; use tensors made outside the check"))
        for storage in list(live_storages):
            if storage.seq >= self.first_seq and storage not in self.journal:
                spec = storage.value.spec
                storage.value = Value.of_data(DeviceData(spec, future=dead))
                storage.version += 1
                live_storages.discard(storage)


class _HostWriteJournal(TorchDispatchMode):
    """Saves host tensors before a dry run writes them (an optimizer's CPU
    ``step`` counter, say), so that they can be put back."""

    def __init__(self):
        super().__init__()
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        schema = func._schema
        if schema.is_mutable:
            names = [a.name for a in schema.arguments]
            bound = dict(zip(names, args), **kwargs)
            for a in schema.arguments:
                if not (a.alias_info and a.alias_info.is_write):
                    continue
                t = bound.get(a.name)  # a tensor, or a list of them (a foreach op's Tensor(a!)[])
                for x in (t if isinstance(t, (list, tuple)) else (t,)):
                    if (isinstance(x, torch.Tensor) and x.device.type == "cpu"
                            and id(x) not in self.saved):
                        self.saved[id(x)] = (x, x.detach().clone())
        return func(*args, **kwargs)

    def restore(self) -> None:
        with torch.no_grad():
            for t, old in self.saved.values():
                t.copy_(old)


def _why(func, vals) -> str:
    for v in vals:
        if isinstance(v, Value) and v.spec.dtype in UNSUPPORTED_DTYPES:
            return f"dtype {str(v.spec.dtype)[6:]} is not compiled"
        if isinstance(v, complex):
            return "complex scalar argument"
    name = _support.mlir_name(func)
    if name in _support.DENIED:
        return _support.DENIED[name]
    if _support.op_is_supported(func):
        return "in-place op without a functional form"
    return "not in torch-mlir's torch dialect and no decomposition"


def active() -> _DryRun | None:
    return _active[0]


def dry_run(fn, args=(), kwargs=None, max_steps: int | None = None) -> CoverageReport:
    """Run ``fn(*args, **kwargs)`` as a dry run; see the module docstring."""
    if _active[0] is not None:
        raise RuntimeError("lazy-mlir: check_coverage cannot be nested")
    wait_device_ops()  # graphs launched before keep their real results
    run = _DryRun(max_steps)
    counters = metrics.snapshot()
    rng = torch.get_rng_state()
    host_writes = _HostWriteJournal()
    _active[0] = run
    try:
        with host_writes:
            fn(*args, **(kwargs or {}))
    except DryRunStop as e:
        run.report.stopped = None if str(e).startswith("step limit") else str(e)
    finally:
        _active[0] = None
        host_writes.restore()
        captured = metrics.diff(counters)
        metrics.restore(counters)
        torch.set_rng_state(rng)
        run.restore()
    for name, n in captured.items():
        if name.startswith("lazy::"):
            op = name[len("lazy::"):]
            use = run.report.ops.setdefault(op, OpUse(op))
            if not use.fallback:
                use.count += n
    return run.report


def check_coverage(fn, *args, **kwargs) -> CoverageReport:
    """List the ops of ``fn(*args, **kwargs)`` that would fall back to eager
    CPU, before compiling anything. CPU tensor arguments are moved to the lazy
    device first (modules and tensors already there are used as they are)::

        report = lm.check_coverage(train_step, model, x, y)
        print(report)            # or report.fallbacks, report.ok, report.to_json()
    """
    moved = [a.to("lazy") if isinstance(a, torch.Tensor) and not isinstance(a, LazyTensor)
             else a for a in args]
    return dry_run(fn, moved, kwargs)


def report_json(report: CoverageReport) -> str:
    return json.dumps(report.to_json(), indent=2)
