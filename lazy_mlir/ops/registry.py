"""The one registry of aten op decompositions: which function rewrites an op,
at which stage (scope), and which wins where two could.

Scopes (where a table built here is applied):

- ``CAPTURE``: while recording (``lazy/decompose.py``), for functional ops the
  compiler cannot take (``support.op_is_supported`` false, ops denied at run
  time included). Over PyTorch's own table (``torch._decomp``).
- ``IMPORT``: on the fx graph before torch-mlir imports it
  (``pipeline/fx_graph.decompose``), for ops torch-mlir imports but lowers
  badly or not at all. Over torch-mlir's recommended table.
- ``TARGET``: target-dependent fx rewrites (``passes/conv_matmul.py``,
  ``passes/pool_elementwise.py``), applied by ``pipeline/stages.lower`` where
  ``PipelineConfig.conv_as_matmul(target)`` holds (by default on cpu only).
  Their functions take build-time arguments, so ``passes/`` keeps building
  those tables; they register here so that the registry lists every rewrite
  and duplicate checks cover them too. They exist once ``passes/`` is
  imported (``lm.debug.explain_op`` and the command line import it).

Guarantees:

- A second registration of an op in a scope raises ``ValueError`` unless it
  says ``overrides=True``; even then two registrations of one op with the
  same priority raise (their order would be an accident of import order).
- ``build_table(scope)``: per op, the registrations in ascending priority; a
  plain one replaces what is below it, a ``chained`` one (a factory
  ``(op, below) -> decomposition``) wraps it. The highest plain registration
  wins; ``shadowed()`` lists the plain ones that never do (dead code).
- Upstream tables (PyTorch's, torch-mlir's) are not registrations: the
  builders in ``support.py`` put ours over them, so chained entries wrap
  only our own.
"""
from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from typing import Callable

import torch

CAPTURE, IMPORT, TARGET = "capture", "import", "target"
SCOPES = (CAPTURE, IMPORT, TARGET)

# The domain modules that register CAPTURE and IMPORT decompositions: the plain
# list the tables are built from (as torch-mlir's fx_decomp_util lists ops).
DOMAINS = (
    "attention", "bessel", "bessel_jy", "compile_gaps", "conv", "ctc", "distance", "elementwise", "embedding_bag", "foreach",
    "fake_quantize", "grid_sample_backward", "grouped_mm", "half_opmath", "index",
    "linalg_cholesky", "linalg_det", "linalg_lu", "linalg_qr", "linear", "lowering", "nn",
    "optim", "precise", "random_fills", "reductions", "restride", "rnn", "sort_scan", "special", "special_gamma",
    "integer_division", "subgraph",
    "narrow_opmath",  # (wraps our entries and torch-mlir's of each of its ops)
    "uint8_promotion",  # (last: it wraps the decompositions above it)
)


@dataclass(frozen=True)
class Registration:
    """One decomposition of one op in one scope."""

    op: torch._ops.OpOverload
    fn: Callable
    scope: str
    priority: int
    chained: bool  # ``fn(op, below)`` makes a decomposition wrapping ``below``

    @property
    def where(self) -> str:
        """``lazy_mlir/ops/special.py:41: erfc``: the file, line and function."""
        module = getattr(self.fn, "__module__", "?") or "?"
        path = module.replace(".", "/") + ".py"
        code = getattr(self.fn, "__code__", None)
        line = f":{code.co_firstlineno}" if code is not None else ""
        return f"{path}{line}: {getattr(self.fn, '__qualname__', repr(self.fn))}"


_registry: dict[str, dict[torch._ops.OpOverload, list[Registration]]] = {
    s: {} for s in SCOPES}
_lock = threading.Lock()


def _overloads(ops) -> list[torch._ops.OpOverload]:
    """An op, a packet (all its overloads, as torch._decomp does) or a list."""
    if isinstance(ops, (list, tuple, set, frozenset)):
        return [o for op in ops for o in _overloads(op)]
    if isinstance(ops, torch._ops.OpOverloadPacket):
        return [getattr(ops, name) for name in ops.overloads()]
    if isinstance(ops, torch._ops.OpOverload):
        return [ops]
    raise TypeError(f"not an aten op: {ops!r}")


def register_decomposition(ops, *, scope: str, priority: int = 0, overrides: bool = False,
                           chained: bool = False):
    """Decorator: register the function for ``ops`` in ``scope``; returns it
    unchanged. ``chained``: the function is a factory ``(op, below) ->
    decomposition`` wrapping the registration below it (or None)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}: one of {SCOPES}")

    def decorator(fn):
        for op in _overloads(ops):
            add(Registration(op, fn, scope, priority, chained), overrides=overrides)
        return fn
    return decorator


def add(reg: Registration, *, overrides: bool = False) -> None:
    """Register ``reg`` (see ``register_decomposition`` for the checks)."""
    with _lock:
        regs = _registry[reg.scope].setdefault(reg.op, [])
        if regs and not overrides:
            raise ValueError(f"{reg.op} already has a {reg.scope} decomposition "
                             f"({regs[0].where}); {reg.where} must say overrides=True")
        if any(r.priority == reg.priority for r in regs):
            raise ValueError(f"{reg.op}: {reg.where} has the priority {reg.priority} of "
                             f"another {reg.scope} registration; give an explicit order")
        regs.append(reg)
        regs.sort(key=lambda r: r.priority)


def remove(reg: Registration) -> None:
    """Undo ``add`` (tests register and remove throwaway entries)."""
    with _lock:
        regs = _registry[reg.scope].get(reg.op, [])
        if reg in regs:
            regs.remove(reg)
        if not regs:
            _registry[reg.scope].pop(reg.op, None)


def load_domains() -> None:
    """Import every domain module (registrations happen on import)."""
    for name in DOMAINS:
        importlib.import_module(f"{__package__}.{name}")


def registrations(op, scope: str | None = None) -> list[Registration]:
    """The registrations of ``op`` (in ``scope``, or all), lowest priority first."""
    load_domains()
    scopes = SCOPES if scope is None else (scope,)
    return [r for s in scopes for r in _registry[s].get(op, [])]


def registered(scope: str) -> list[Registration]:
    """Every registration in ``scope``, per op lowest priority first."""
    load_domains()
    return [r for regs in list(_registry[scope].values()) for r in regs]


def build_table(scope: str) -> dict:
    """op -> decomposition of our registrations in ``scope`` (see the module
    docstring for how priorities combine). A fresh dict on every call."""
    load_domains()
    table = {}
    for op, regs in list(_registry[scope].items()):
        fn = None
        for r in regs:
            fn = r.fn(op, fn) if r.chained else r.fn
        if fn is not None:
            table[op] = fn
    return table


def shadowed() -> list[Registration]:
    """Plain registrations a higher-priority plain one replaces: never used."""
    load_domains()
    out = []
    for scope in SCOPES:
        for regs in _registry[scope].values():
            plain = [r for r in regs if not r.chained]
            out += plain[:-1]
    return out


class ReentryGuard:
    """A per-thread flag for a decomposition that calls its own op (or one
    it also decomposes): while ``with guard:`` runs, ``guard.active`` is true
    and the decomposition returns ``NotImplemented``, so ``make_fx`` traces
    the nested call as the op itself instead of recursing. Each domain keeps
    its own guard: a guard set by one does not stop another's decomposition."""

    def __init__(self):
        self._local = threading.local()

    @property
    def active(self) -> bool:
        return getattr(self._local, "on", False)

    def __enter__(self):
        self._local.on = True
        return self

    def __exit__(self, *exc):
        # Cleared, not restored: no guarded call nests inside its own guard.
        self._local.on = False
        return False
