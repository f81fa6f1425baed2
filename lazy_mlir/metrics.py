"""Counters and timings in the style of ``torch._lazy.metrics``.

``lazy::<op>`` counts a captured op, ``aten::<op>`` an op that fell back to
eager CPU, ``decomposed::<op>`` an op captured as its decomposition (each of
its ops counted as ``lazy::``), ``folded::<op>`` an op whose inputs are all
empty, computed at capture from shapes alone, ``sync::<op>`` an op that
needed a value on the host. Timings are
kept as samples (seconds) so the report can give totals and percentiles.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager

_lock = threading.Lock()
_counters: dict[str, int] = defaultdict(int)
_samples: dict[str, list[float]] = defaultdict(list)


def counter_inc(name: str, n: int = 1) -> None:
    with _lock:
        _counters[name] += n


def counter_names() -> list[str]:
    """Names of all counters with a non-zero value, sorted."""
    with _lock:
        return sorted(k for k, v in _counters.items() if v)


def counter_value(name: str) -> int:
    """Value of a counter; 0 when it was never incremented."""
    with _lock:
        return _counters.get(name, 0)


def host_reads() -> dict[str, int]:
    """The ``sync::`` and ``aten::`` counters (host reads and eager
    fallbacks), to diff around a capture that must have neither."""
    with _lock:
        return {k: v for k, v in _counters.items() if v and k.startswith(("sync::", "aten::"))}


def changed_since(before: dict[str, int]) -> list[str]:
    """The ``host_reads`` counters that moved since ``before``, sorted."""
    return sorted(n for n, v in host_reads().items() if v != before.get(n, 0))


def add_sample(name: str, seconds: float) -> None:
    with _lock:
        _samples[name].append(seconds)


def metric_names() -> list[str]:
    with _lock:
        return sorted(_samples)


def metric_data(name: str) -> tuple[int, float, list[float]]:
    """(number of samples, total seconds, samples) of a timing metric."""
    with _lock:
        s = list(_samples.get(name, ()))
    return len(s), sum(s), s


@contextmanager
def timed(name: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        add_sample(name, time.perf_counter() - t0)


def reset() -> None:
    """Clear all counters and timings."""
    with _lock:
        _counters.clear()
        _samples.clear()


def snapshot() -> tuple[dict, dict]:
    """A copy of every counter and timing (``restore`` puts it back)."""
    with _lock:
        return dict(_counters), {k: list(v) for k, v in _samples.items()}


def diff(before: tuple[dict, dict]) -> dict[str, int]:
    """Counters' increase since ``before``."""
    with _lock:
        return {k: v - before[0].get(k, 0) for k, v in _counters.items()
                if v != before[0].get(k, 0)}


def restore(saved: tuple[dict, dict]) -> None:
    with _lock:
        _counters.clear()
        _counters.update(saved[0])
        _samples.clear()
        _samples.update({k: list(v) for k, v in saved[1].items()})


def _fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f}ms"
    return f"{seconds * 1e6:.3f}us"


def metrics_report() -> str:
    """A text report of every timing metric and counter."""
    lines = []
    for name in metric_names():
        n, total, s = metric_data(name)
        if not n:
            continue
        s = sorted(s)
        pct = ", ".join(f"{p}%={_fmt(s[min(len(s) - 1, int(len(s) * p / 100))])}"
                        for p in (1, 50, 99))
        lines += [f"Metric: {name}", f"  TotalSamples: {n}",
                  f"  Accumulator: {_fmt(total)}", f"  Percentiles: {pct}"]
    for name in counter_names():
        lines += [f"Counter: {name}", f"  Value: {counter_value(name)}"]
    return "\n".join(lines) + "\n"
