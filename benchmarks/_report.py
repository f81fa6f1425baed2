"""What reports: each row judged against eager (step-1 loss), the paired
ratio to eager, and the tables (rich on the console, markdown to a file)."""
from __future__ import annotations

import os
import statistics

from _specs import COMPILE_ABS_TOL, DRIFT_REL_TOL, REL_TOL, Row


def paired_ratio(res: dict, eager: dict) -> tuple[float, float, float] | None:
    """(median, min, max) over rounds of this row's median over eager's in the
    same round; None without rounds on both sides. Rounds run the backends
    one after the other, so a ratio within a round sees the same load."""
    a, e = res.get("round_ms"), eager.get("round_ms")
    if not a or not e or len(a) != len(e):
        return None
    ratios = [x / y for x, y in zip(a, e)]
    return statistics.median(ratios), min(ratios), max(ratios)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def judge(rows: list[Row]) -> None:
    """Fill in correctness (step-1 loss vs eager) and notes for every row."""
    ref = {r.spec: r.res for r in rows if r.backend == "eager" and "losses" in r.res}
    for r in rows:
        if "error" in r.res:
            r.correctness = "ERROR"
            r.notes.insert(0, r.res["error"])
            continue
        r.notes += r.res.get("notes", [])
        if r.res.get("load", 0) > (os.cpu_count() or 1):
            # other processes compete for the cores: the timings are noisy
            r.notes.append(f"host load {r.res['load']:.1f} at start")
        losses = r.res["losses"]
        eager = ref.get(r.spec)
        if eager is None:
            r.correctness = "n/a (no eager)"
            continue
        e = eager["losses"]
        d = _rel(losses[0], e[0])
        ok = d <= REL_TOL
        if r.backend == "compile" and abs(losses[0] - e[0]) > COMPILE_ABS_TOL:
            ok = False
            r.notes.append(f"compile step-1 |dloss|={abs(losses[0] - e[0]):.2e} > 1e-4")
        r.correctness = "ok" if ok else "MISMATCH"
        if not ok:
            r.notes.append(f"step-1 loss {losses[0]:.6g} vs eager {e[0]:.6g}")
        if r.backend != "eager":
            # Informational: steps 2-4 see the gradients and the optimizer's update.
            # (Later steps are not compared: the CNN with Adadelta(lr=1) amplifies
            # rounding, a 1e-7 weight perturbation moves its step-9 loss by ~0.5%.)
            for i in range(1, min(4, len(losses), len(e))):
                if _rel(losses[i], e[i]) > DRIFT_REL_TOL:
                    r.notes.append(f"step-{i + 1} loss {losses[i]:.6g} vs eager {e[i]:.6g}")
                    break


def _fmt(ms: float) -> str:
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


HEADER = ["model", "batch", "backend", "first step (ms)", "step min (ms)",
          "step median (ms)", "step max (ms)", "vs eager (median)", "correctness", "notes"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    med, eager = {}, {}
    for r in rows:
        if r.backend == "eager" and r.res.get("steady_ms"):
            med[r.spec] = statistics.median(r.res["steady_ms"])
            eager[r.spec] = r.res
    out = []
    for r in rows:
        s = r.res.get("steady_ms") or []
        first = _fmt(r.res["first_ms"]) if "first_ms" in r.res else "-"
        if s:
            m = statistics.median(s)
            cells = [_fmt(min(s)), _fmt(m), _fmt(max(s))]
            ratio = f"{m / med[r.spec]:.2f}x" if r.spec in med else "-"
            paired = paired_ratio(r.res, eager[r.spec]) if r.spec in eager else None
            if paired is not None and r.backend != "eager":
                ratio = f"{paired[0]:.2f}x ({paired[1]:.2f}-{paired[2]:.2f})"
        else:
            cells, ratio = ["-", "-", "-"], "-"
        out.append([r.spec.name, str(r.spec.batch), r.backend, first, *cells, ratio,
                    r.correctness, "; ".join(r.notes)])
    return out


def markdown(rows: list[Row], title: str) -> str:
    body = table_rows(rows)
    esc = lambda c: c.replace("|", "\\|")  # noqa: E731
    lines = [title, "", "| " + " | ".join(HEADER) + " |",
             "|" + "|".join("---" if i in (0, 2, 8, 9) else "---:" for i in range(len(HEADER)))
             + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def rich_table(rows: list[Row], title: str):
    from rich.table import Table
    t = Table(title=title)
    for i, h in enumerate(HEADER):
        if h == "notes":
            t.add_column(h, overflow="fold", min_width=30)
        else:
            t.add_column(h, justify="left" if i in (0, 2, 8) else "right", no_wrap=True)
    for r, cells in zip(rows, table_rows(rows)):
        style = {"ok": None, "ERROR": "red", "MISMATCH": "yellow"}.get(r.correctness)
        t.add_row(*cells, style=style)
    return t


def print_report(rows: list[Row], table_title: str, title: str, out_path: str | None) -> None:
    """The rich table on the console (at least 180 columns, so rows stay whole
    in a log), then the markdown table, also written to ``out_path``."""
    from rich.console import Console
    Console(width=max(Console().width, 180)).print(rich_table(rows, table_title))
    md = markdown(rows, title)
    print()
    print(md)
    if out_path:
        with open(out_path, "w") as f:
            f.write(md)
