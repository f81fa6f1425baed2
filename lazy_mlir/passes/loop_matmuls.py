"""Matmuls inside a loop are not data-tiled (a linalg-stage pass, cpu only).

The cpu target data-tiles matmuls (``targets.CPU_DATA_TILING``): IREE packs
both operands into its microkernel's layout before each matmul. A matmul in
a counted loop (``ops/loops.py``: an RNN's recurrent ``h @ w_hh^T``) packs
its loop-invariant weight again at every iteration: IREE 3.13 does not hoist
the pack out of a host loop. For the suite's medium LSTM (hidden 512, batch
8) the pack of ``w_hh`` (2048 x 512) took twice the matmul's time, 1024
times a training step. Unpacked, IREE's own code for a matmul of 8 rows runs
at the microkernel's speed or better: a loop of 128 ``[8, 512] x [512,
2048]^T`` steps took 0.30 ms an iteration against 0.62 with the pack
(``iree-benchmark-module``, one thread, process CPU).

IREE data-tiles every supported matmul unless some operation of the module
carries the hint ``iree.opt.data_tiling``; then it tiles only those
(``AnnotateDataTilingHints``). So in a module with a matmul inside a loop,
every ``linalg.matmul`` and ``linalg.batch_matmul`` outside loops gets the
hint and those inside none. Other contractions (``linalg.generic`` ones)
then stay unpacked: IREE fails the compile on a hint it cannot honour, so
only the named ops it always packs are hinted. Modules without such a loop
are left as they are.

Unpacked, a matmul reads its right operand as it is laid out: ``h @ w^T``
(``F.linear``; IREE fuses the transpose into the matmul and reads ``w`` by
rows) ran at 0.30 ms against 0.50 for ``g @ w`` read by columns (the
backward's ``[8, 2048] x [2048, 512]``). ``ops/rnn.py`` writes the latter as
``g @ (w^T)^T`` with ``w^T`` made before the loop, but IREE folds the two
transposes back: so a transpose made outside a loop and passed into it
reaches the loop through a ``linalg_edit.FUSION_BARRIER``.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

HINT = "iree.opt.data_tiling"
DATA_TILED = ("linalg.matmul", "linalg.batch_matmul")


def untile_loop_matmuls(module) -> int:
    """Hint the matmuls outside loops when a matmul is inside one; returns
    how many matmuls are inside loops (0: the module is unchanged)."""
    ops = [op for name in DATA_TILED for op in E.ops_named(module, name)]
    looped = [op for op in ops if E.in_loop(op)]
    if looped:
        for op in ops:
            if not E.in_loop(op):
                E.mark(op, HINT)
        for op in E.ops_named(module, "linalg.transpose"):
            if not E.in_loop(op):
                E.barrier_into(op.results[0], ("scf.for",))
    return len(looped)
