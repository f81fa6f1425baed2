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
import weakref
from collections import defaultdict
from contextlib import contextmanager

_lock = threading.Lock()  # guards the shard list, the base and the samples
_samples: dict[str, list[float]] = defaultdict(list)

# Counters are kept per thread (``_local.counts``, a shard only its own thread
# writes): ``counter_inc`` runs on every captured op, and taking a lock there
# cost ~0.2 us a call where a thread's own dict costs ~0.07. A reader sums
# the shards (each copied whole: one C-level step under the GIL, so a write
# in another thread lands before or after it, never half-way). ``reset`` and
# ``restore`` change ``_base``, subtracted on every read, never another
# thread's shard, so no increment is ever lost or resurrected.
_local = threading.local()
_shards: list[dict[str, int]] = []  # the live threads' shards
_retired: dict[str, int] = defaultdict(int)  # the counts of threads that ended
_ended: list[dict[str, int]] = []  # shards of threads that ended, still to retire
_base: dict[str, int] = {}
_owners: dict = {}  # id(shard) -> the weak reference whose callback retires it


class _Owner:
    """Kept in a thread's local storage only: it dies with the thread, and
    its shard is then retired (summed into ``_retired``) by the next new
    shard, so a process that starts many threads keeps few shards."""

    __slots__ = ("__weakref__",)


def _own_shard() -> dict[str, int]:
    counts = defaultdict(int)
    owner = _Owner()
    with _lock:
        while _ended:  # (no thread writes them any more)
            shard = _ended.pop()
            _shards.remove(shard)
            _owners.pop(id(shard), None)
            for k, v in shard.items():
                _retired[k] += v
        _shards.append(counts)
        _owners[id(counts)] = weakref.ref(owner, lambda _, c=counts: _ended.append(c))
    _local.owner = owner
    _local.counts = counts
    return counts


def counter_inc(name: str, n: int = 1) -> None:
    try:
        counts = _local.counts
    except AttributeError:
        counts = _own_shard()
    counts[name] += n


def _raw() -> dict[str, int]:
    """Every thread's counts summed (the caller holds ``_lock``)."""
    total: dict[str, int] = defaultdict(int, _retired)
    for shard in _shards:
        for k, v in dict(shard).items():
            total[k] += v
    return total


def _totals() -> dict[str, int]:
    """Every counter's value (the caller holds ``_lock``)."""
    raw = _raw()
    return {k: v - _base.get(k, 0) for k, v in raw.items()}


def counter_names() -> list[str]:
    """Names of all counters with a non-zero value, sorted."""
    with _lock:
        return sorted(k for k, v in _totals().items() if v)


def counter_value(name: str) -> int:
    """Value of a counter; 0 when it was never incremented."""
    with _lock:
        return (_retired.get(name, 0) + sum(shard.get(name, 0) for shard in _shards)
                - _base.get(name, 0))


def host_reads() -> dict[str, int]:
    """The ``sync::`` and ``aten::`` counters (host reads and eager
    fallbacks), to diff around a capture that must have neither."""
    with _lock:
        return {k: v for k, v in _totals().items() if v and k.startswith(("sync::", "aten::"))}


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
        _base.clear()
        _base.update(_raw())
        _samples.clear()


def snapshot() -> tuple[dict, dict]:
    """A copy of every counter and timing (``restore`` puts it back)."""
    with _lock:
        return ({k: v for k, v in _totals().items() if v},
                {k: list(v) for k, v in _samples.items()})


def diff(before: tuple[dict, dict]) -> dict[str, int]:
    """Counters' increase since ``before``."""
    with _lock:
        now = _totals()
    return {k: now.get(k, 0) - before[0].get(k, 0) for k in now.keys() | before[0].keys()
            if now.get(k, 0) != before[0].get(k, 0)}


def restore(saved: tuple[dict, dict]) -> None:
    with _lock:
        raw = _raw()
        _base.clear()
        _base.update({k: raw.get(k, 0) - saved[0].get(k, 0)
                      for k in raw.keys() | saved[0].keys()})
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
