"""Python's cyclic garbage collector, held back while a step is captured.

A captured step's nodes (Node, Value, their lists and weakrefs: ~6 tracked
objects per recorded op) all live until the sync that ends the step, then
die together by reference counting. With the default thresholds (700, 10,
10) the collector's young-generation passes run every 700 net allocations,
find them alive and promote them, so they reach the oldest generation; every
~25% of the heap's size promoted (in a process with ``transformers`` loaded,
~100k objects: every 10-20 steps of GPT-2, every 3-4 of the LSTM) a FULL
collection walks the whole heap, 150-190 ms here (issue 26: 25-30% of the
plain loop's mean step).

So while a step is captured the first generation's threshold is raised to
``HOLD_GEN0`` (the net allocations of a whole step, for the suite's
models), and restored at the step's sync: the step's nodes die young, before
any collection sees them, and nothing is promoted. Cyclic garbage the step
itself makes is collected by the first young pass after the sync, as ever
(at most ``HOLD_GEN0`` objects wait for it). The user's thresholds are put
back exactly, and left alone when the collector is off, its first threshold
is 0 or already higher, or the user changed them meanwhile.
"""
from __future__ import annotations

import gc
import threading

# Above the net tracked allocations of one captured step of the suite's
# models (GPT-2 tiny ~8k, the LSTM ~30k); a step that makes more is
# collected every HOLD_GEN0 allocations, as a smaller threshold would.
HOLD_GEN0 = 100_000

# None: not looked at since the last sync; False: looked, left alone;
# (the user's thresholds, the held ones) while held.
held: list = [None]
_lock = threading.Lock()  # (backward captures on autograd's threads too)


def hold() -> None:
    """Raise the first threshold for the step being captured (the first op
    after a sync calls this)."""
    with _lock:
        if held[0] is not None:
            return
        mine = gc.get_threshold()
        if not gc.isenabled() or mine[0] == 0 or mine[0] >= HOLD_GEN0:
            held[0] = False
            return
        raised = (HOLD_GEN0, *mine[1:])
        gc.set_threshold(*raised)
        held[0] = (mine, raised)


def release() -> None:
    """Put the user's thresholds back (a sync ends the step's capture)."""
    if held[0] is None:
        return
    with _lock:
        was, held[0] = held[0], None
        if was and gc.get_threshold() == was[1]:  # (not changed by the user meanwhile)
            gc.set_threshold(*was[0])
