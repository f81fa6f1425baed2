"""``lazy-mlir cache stats | list | clear``: the on-disk compiled-module cache.

``add_parser(subparsers)`` registers the subcommand on the ``lazy-mlir``
parser; the handler prints with rich and returns 0. The cache location is the
one the lazy device uses (``LAZY_MLIR_CACHE_DIR`` / ``XDG_CACHE_HOME`` /
``~/.cache/lazy-mlir``) unless ``--cache-dir`` says otherwise. The commands
work even when ``LAZY_MLIR_CACHE=0``, so a disabled cache can still be
inspected and cleared.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``cache`` to ``subparsers`` (from ``add_subparsers``); returns its parser."""
    where = ("cache location (default: LAZY_MLIR_CACHE_DIR, else "
             "XDG_CACHE_HOME/lazy-mlir, else ~/.cache/lazy-mlir)")
    # Accepted before or after the action; SUPPRESS keeps the action's parser
    # from overwriting a value given before it with its own default.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--cache-dir", type=Path, default=argparse.SUPPRESS, help=where)
    p = subparsers.add_parser("cache",
                              help="inspect or clear the on-disk compiled-module cache")
    p.add_argument("--cache-dir", type=Path, default=None, help=where)
    actions = p.add_subparsers(dest="cache_action", metavar="ACTION")
    actions.add_parser("stats", parents=[common], help="location, entries and size (default)")
    ls = actions.add_parser("list", parents=[common],
                            help="cached modules, most recently used first")
    ls.add_argument("--limit", type=int, default=None, help="show at most this many")
    actions.add_parser("clear", parents=[common], help="remove every cached module")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from ..compile_service.disk_cache import DiskCache, cache_enabled, default_cache_dir
    cache = DiskCache(getattr(args, "cache_dir", None) or default_cache_dir())
    console = Console()
    action = getattr(args, "cache_action", None) or "stats"
    if action == "list":
        _print_list(console, cache, getattr(args, "limit", None))
    elif action == "clear":
        n = cache.clear()
        console.print(f"removed {n} cached module{'s' * (n != 1)} from {cache.root}")
    else:
        _print_stats(console, cache, cache_enabled())
    return 0


def _print_stats(console, cache, env_enabled: bool) -> None:
    from rich.table import Table
    s = cache.stats()
    t = Table(title="lazy-mlir compiled-module cache", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("location", s["location"])
    t.add_row("enabled", "yes" if s["enabled"] and env_enabled else
              "no (LAZY_MLIR_CACHE=0)" if not env_enabled else "no")
    t.add_row("entries", str(s["entries"]))
    t.add_row("size", f"{_human(s['total_bytes'])} of {_human(s['max_bytes'])}")
    console.print(t)


def _print_list(console, cache, limit: int | None) -> None:
    from rich.table import Table
    entries = cache.entries()
    if not entries:
        console.print(f"no cached modules in {cache.root}")
        return
    shown = entries[:limit] if limit is not None else entries
    n = len(entries)
    t = Table(title=f"{n} cached module{'s' * (n != 1)} in {cache.root}")
    t.add_column("key", no_wrap=True)
    t.add_column("size", justify="right", no_wrap=True)
    t.add_column("last used", no_wrap=True)
    t.add_column("target")
    t.add_column("graph")
    for e in shown:
        meta = e["meta"]
        t.add_row(e["key"][:12], _human(e["size"]),
                  time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["last_used"])),
                  str(meta.get("target", "")), str(meta.get("graph", "")))
    console.print(t)
    if len(shown) < len(entries):
        console.print(f"... and {len(entries) - len(shown)} more")


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # unreachable
