"""``lazy-mlir coverage SCRIPT.py``: the ops a script would fall back on,
found by a dry run that compiles nothing (see ``lazy/coverage.py``)."""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from .errors import UsageError


def run_coverage(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..lazy.coverage import dry_run
    script = Path(args.script)
    if not script.is_file():
        raise UsageError(f"no such script: {script}")
    failure: list[str] = []

    def main():
        argv = sys.argv
        sys.argv = [str(script), *args.script_args]
        try:
            runpy.run_path(str(script), run_name="__main__")
        except SystemExit as e:
            if e.code not in (None, 0):
                failure.append(f"{script} exited with status {e.code}")
        finally:
            sys.argv = argv

    try:
        report = dry_run(main, max_steps=args.steps or None)
    except Exception as e:  # the script's own error: the report so far is lost
        raise UsageError(f"{script} raised {type(e).__name__}: {e} during the dry run (run "
                         "it directly for the traceback)") from None
    if failure:
        raise UsageError(failure[0])
    if args.json:
        Path(args.json).write_text(json.dumps(report.to_json(), indent=2))
    console = Console()
    title = (f"lazy-mlir coverage of {script.name}: {len(report.compiled)} op(s) compile, "
             f"{len(report.fallbacks)} would fall back ({report.steps} step(s) checked)")
    table = Table(title=title)
    for col in ("aten op", "calls", "first seen at", "why it falls back"):
        table.add_column(col)
    for u in report.fallbacks:
        table.add_row(u.op, str(u.count), u.locations[0] if u.locations else "-", u.reason or "")
    if report.fallbacks:
        console.print(table)
    else:
        console.print(title)
    if args.verbose:
        console.print("compiled: " + ", ".join(f"{u.op} x{u.count}" for u in report.compiled))
        for where, n in report.syncs.items():
            console.print(f"value read on the host (a sync point): {where} x{n}")
    if report.stopped:
        console.print(f"[yellow]stopped early[/]: {report.stopped}")
    return 1 if report.fallbacks or report.stopped else 0


def add_parser(sub) -> None:
    c = sub.add_parser(
        "coverage", help="list the ops of a script that would fall back to eager CPU, "
                         "by a dry run that compiles and runs nothing",
        usage="lazy-mlir coverage SCRIPT.py [options] [-- script args]",
        description="Runs SCRIPT.py on the lazy device as a dry run: ops are captured as in a "
                    "real run, nothing is compiled or executed, values read on the host are "
                    "zeros. Exit status 0 when every op compiles, 1 when some would fall back.")
    c.add_argument("script", help="the Python script to check")
    c.add_argument("--steps", type=int, default=2,
                   help="stop after this many lm.mark_step() calls (2; 0 = run to the end)")
    c.add_argument("--json", help="also write the report as JSON to this file")
    c.add_argument("-v", "--verbose", action="store_true",
                   help="also list the ops that compile and where values are read")
    c.set_defaults(func=run_coverage)
