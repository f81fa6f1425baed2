"""The recompile explainer, and the user's source line of each captured op.

With ``LAZY_MLIR_DEBUG=1`` or ``explain_recompiles()``, capture records the
Python line of every op (``user_location``) and every uncached compile logs
why it happened (``on_uncached_compile``): the nearest graph compiled before,
what differs (op, shape, dtype, constant) and the line where the differing op
was captured.
"""
from __future__ import annotations

import difflib
import logging
import os
import sys

log = logging.getLogger("lazy_mlir")
_state = {"explain": os.environ.get("LAZY_MLIR_DEBUG", "") not in ("", "0"), "seen": []}
_MAX_REMEMBERED = 64
_SKIP = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(
    os.path.dirname(os.path.abspath(__import__("torch").__file__))))


def explain_recompiles(on: bool = True) -> None:
    """Log why each uncached compile happened (also ``LAZY_MLIR_DEBUG=1``)."""
    _state["explain"] = on


def forget_compiles() -> None:
    """Forget the graphs remembered for explaining recompiles (``lazy.state.reset``)."""
    _state["seen"].clear()


def tracking_locations() -> bool:
    return _state["explain"]


def user_location() -> str | None:
    """``file:line`` of the innermost frame outside torch and lazy_mlir."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith("<frozen"):
            return f"{name}:{f.f_lineno}"
        f = f.f_back
    return None


def _describe(graph) -> list[str]:
    """One line per node: op, constants and tensor signatures."""
    from .ir import Value
    lines = [f"input {d.spec.signature()}" for d in graph.inputs]
    for n in graph.nodes:
        args = ", ".join(a.spec.signature() if type(a) is Value else repr(a) for a in n.flat)
        outs = ", ".join(v.spec.signature() for v in n.outputs)
        lines.append(f"{n.op.__name__}({args}) -> {outs}")
    return lines


def _kind(a: str, b: str) -> str:
    if a.startswith("input") and b.startswith("input"):
        return "input signature"
    if a.split("(")[0] != b.split("(")[0]:
        return "op"
    sa = [s for s in a.replace(")", ",").split(", ") if "[" in s]
    sb = [s for s in b.replace(")", ",").split(", ") if "[" in s]
    if [s.split("[")[0] for s in sa] != [s.split("[")[0] for s in sb]:
        return "dtype"
    if sa != sb:
        return "shape"
    return "constant"


def on_uncached_compile(graph) -> None:
    """Called for each graph about to be compiled."""
    if not _state["explain"]:
        return
    lines = _describe(graph)
    seen = _state["seen"]
    if not seen:
        log.warning("lazy-mlir: compiling graph %s (%d ops): the first graph",
                    graph.key[:12], len(graph.nodes))
    else:
        best = max(seen, key=lambda s: difflib.SequenceMatcher(None, s[1], lines,
                                                               autojunk=False).ratio())
        report = _diff(best, graph, lines)
        log.warning("lazy-mlir: compiling graph %s (%d ops); nearest compiled graph %s:\n%s",
                    graph.key[:12], len(graph.nodes), best[0][:12], report)
    seen.append((graph.key, lines, [n.location for n in graph.nodes]))
    del seen[:-_MAX_REMEMBERED]


def _diff(best, graph, lines) -> str:
    key, old, _ = best
    n_inputs = len(graph.inputs)
    out = []
    sm = difflib.SequenceMatcher(None, old, lines, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        for k in range(max(i2 - i1, j2 - j1)):
            a = old[i1 + k] if i1 + k < i2 else None
            b = lines[j1 + k] if j1 + k < j2 else None
            where = ""
            if b is not None and j1 + k >= n_inputs:
                loc = graph.nodes[j1 + k - n_inputs].location
                where = f"  (captured at {loc})" if loc else ""
            if a and b:
                out.append(f"  {_kind(a, b)} differs: was {a}\n                    now {b}{where}")
            elif b:
                out.append(f"  new: {b}{where}")
            else:
                out.append(f"  gone: {a}")
            if len(out) >= 8:
                out.append("  ...")
                return "\n".join(out)
    return "\n".join(out) or "  (same structure: the inputs alias differently)"
