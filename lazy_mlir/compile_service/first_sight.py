"""Graphs that never recur are not compiled: the storm guard.

A program whose host reads fall at ever new places makes a new graph at
nearly every read. ``torch.optim.LBFGS`` reads each history entry's
coefficient on the host (``q.add_(old_dirs[i], alpha=-al[i])``) while its
history grows to ``history_size``: an 8-16-1 MLP made 256 graphs in its
first 3 steps (PyTorch's time-sequence-prediction example, a few hundred
a step), each compiled in the background, none run twice, the cores busy
with them for minutes where eager takes 0.1 s.

In the background (``LAZY_MLIR_COMPILE=wait`` compiles every graph) a new
graph is compiled at its first sight, as always, until ``limit()`` graphs
this process compiled have not been looked up again. Past that, a new graph
runs eagerly at its first sight (``EagerFirstSight``; eager PyTorch's
results, not a fallback) and compiles at its second. A training loop's
graphs recur from its second step on, so it never gets there; a storm's
one-off graphs cost one eager run each, and those that do recur (LBFGS's,
once its history is full) are compiled. ``LAZY_MLIR_UNUSED_COMPILES``
sets the limit (0: every graph waits for its second sight).
"""
from __future__ import annotations

import collections
import os

from typing import ClassVar

from .. import metrics
from .executable import COMPILING, EagerExecutable
from .memory_cache import memory_cache

DEFAULT_LIMIT = 16
_REMEMBERED = 4096  # first sights kept (oldest forgotten first)

_unused: collections.OrderedDict = collections.OrderedDict()  # compiled, not looked up again
_seen: collections.OrderedDict = collections.OrderedDict()    # deferred once


class FirstSightExecutable(EagerExecutable):
    """A graph at its first sight in a storm: runs eagerly, blames no op,
    and, like a compiling one, is looked up again at its next run."""

    state: ClassVar[str] = COMPILING

    def __init__(self, gm):
        super().__init__(gm, [])


def limit() -> int:
    text = os.environ.get("LAZY_MLIR_UNUSED_COMPILES", "").strip()
    try:
        value = int(text) if text else DEFAULT_LIMIT
    except ValueError:
        raise ValueError(f"LAZY_MLIR_UNUSED_COMPILES must be a whole number, not {text!r}")
    if value < 0:
        raise ValueError(f"LAZY_MLIR_UNUSED_COMPILES must be 0 or more, not {value}")
    return value


def compiled(key) -> None:
    """``key``'s graph was compiled (or submitted) at a miss."""
    _unused[key] = None
    while len(_unused) > _REMEMBERED:
        _unused.popitem(last=False)


def looked_up(key) -> None:
    """``key``'s graph ran again: its compile was not wasted."""
    _unused.pop(key, None)


def defer(key) -> bool:
    """Whether a miss of ``key`` runs eagerly now instead of compiling:
    its first sight while more than ``limit()`` compiled graphs never recurred."""
    if len(_unused) < limit():
        return False
    for key_ in [k for k in _unused if memory_cache.get(k) is None]:  # (caches cleared)
        del _unused[key_]
    if len(_unused) < limit():
        return False
    if _seen.pop(key, False) is None:  # (its second sight)
        return False
    _seen[key] = None
    while len(_seen) > _REMEMBERED:
        _seen.popitem(last=False)
    metrics.counter_inc("EagerFirstSight")
    return True


def forget() -> None:
    """Start afresh (``lm.reset_caches``-style test isolation)."""
    _unused.clear()
    _seen.clear()
