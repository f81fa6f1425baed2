"""Which matmuls the cpu target data-tiles (a linalg-stage pass, cpu only).

The cpu target data-tiles matmuls (``targets.CPU_DATA_TILING``): IREE packs
both operands into its microkernel's layout before each matmul, and unpacks
the result. IREE data-tiles every supported matmul unless some operation of
the module carries the hint ``iree.opt.data_tiling``; then it tiles only those
(``AnnotateDataTilingHints``). So when some named matmul should stay
unpacked, every other ``linalg.matmul`` and ``linalg.batch_matmul`` gets the
hint. Other contractions (``linalg.generic`` ones) then stay unpacked too:
IREE fails the compile on a hint it cannot honour, so only the named ops it
always packs are hinted. Modules where every matmul is worth its packs are
left as they are. Two kinds are not:

**Matmuls inside a loop.** A matmul in a counted loop (``ops/loops.py``: an
RNN's recurrent ``h @ w_hh^T``) packs its loop-invariant weight again at
every iteration: IREE 3.13 does not hoist the pack out of a host loop. For
the suite's medium LSTM (hidden 512, batch 8) the pack of ``w_hh`` (2048 x
512) took twice the matmul's time, 1024 times a training step. Unpacked,
IREE's own code for a matmul of 8 rows runs at the microkernel's speed or
better: a loop of 128 ``[8, 512] x [512, 2048]^T`` steps took 0.30 ms an
iteration against 0.62 with the pack (``iree-benchmark-module``, one thread,
process CPU).

Unpacked, a matmul reads its right operand as it is laid out: ``h @ w^T``
(``F.linear``; IREE fuses the transpose into the matmul and reads ``w`` by
rows) ran at 0.30 ms against 0.50 for ``g @ w`` read by columns (the
backward's ``[8, 2048] x [2048, 512]``). ``ops/rnn.py`` writes the latter as
``g @ (w^T)^T`` with ``w^T`` made before the loop, but IREE folds the two
transposes back: so a transpose made outside a loop and passed into it
reaches the loop through a ``linalg_edit.FUSION_BARRIER``.

**Batch matmuls of small matmuls** (``tiled_batch_matmul``):
attention's ``Q K^T`` and ``P V`` and their gradients, ``[B*H, S, D]``
operands. Packed, each small matmul pays a pack of both operands and an
unpack of its result; IREE's own code for an unpacked batch matmul ran
1.3-2.7x faster up to 2^28 multiply-adds a matmul (``SMALL_MATMUL_MACS``). In
the medium ``nn.TransformerEncoder``'s training step (24 such batch
matmuls) they went from 65-123 to 160-219 GFLOP/s, and the whole step module
from 474 to 462 ms (in-process, alternated, medians of 6).
"""
from __future__ import annotations

import math

from ..dialects import linalg_edit as E

HINT = "iree.opt.data_tiling"
DATA_TILED = ("linalg.matmul", "linalg.batch_matmul")

SMALL_MATMUL_MACS = 1 << 29
"""Multiply-adds of each matmul of a batch matmul below which it is not
data-tiled. One batch matmul, 2 threads, ``iree-benchmark-module``, packed /
unpacked ms (B x M x N x K), AMD EPYC Zen 4, 2026-11-29:

- 64x128x128x64: 1.47-1.78 / 1.03-1.10; 64x128x64x128: 1.61-2.70 / 1.05-1.08
- 32x256x256x64: 4.1-4.9 / 1.6-1.8; 16x32x32x16: 0.074 / 0.056-0.060
- 8x512x512x128: 4.6-5.3 / 3.5-3.7; 4x512x512x512: 7.2-7.4 / 6.0-6.4
- 4x512x512x1024 (2^28 a matmul): 13.6-13.8 / 12.5-12.9
- 4x1024x1024x512 (2^29): 24.7-26.8 / 28.7-29.1; 4x1024x1024x1024: 44.3 / 62-71

Only where rows and columns both fill whole 16-float vectors (``ALIGNED``).
Where neither does, IREE's unpacked code can be much slower and the packs pad
them (ViT's 65 positions: 64x65x65x64 0.44-0.48 / 0.93-1.14; the medium ViT's
step module ran 272 -> 280 ms with its batch matmuls unpacked). With one side
aligned it was as fast or faster (64x65x64x65 0.54-0.64 / 0.55-0.65,
64x65x128x64 1.45-2.34 / 0.87-0.99, 64x128x65x64 0.95-1.01 / 0.92-0.97), but
no whole model was measured so.
"""

ALIGNED = 16  # float32 lanes of an AVX-512 vector


def tiled_batch_matmul(lhs: list[int] | None, rhs: list[int] | None) -> bool:
    """Whether a batch matmul of these static operand shapes (``[B, M, K]``,
    ``[B, K, N]``; None: dynamic) is worth data tiling."""
    if lhs is None or rhs is None:
        return True  # (IREE's default)
    rows, columns = lhs[1], rhs[-1]
    if rows % ALIGNED or columns % ALIGNED:
        return True
    return math.prod(lhs[1:]) * columns >= SMALL_MATMUL_MACS


def choose_tiled_matmuls(module) -> int:
    """Hint the named matmuls worth data tiling when some matmul is not;
    returns how many matmuls stay unpacked (0: the module is unchanged)."""
    ops = [op for name in DATA_TILED for op in E.ops_named(module, name)]
    looped = [E.in_loop(op) for op in ops]
    tiled = [not inside and (op.name != "linalg.batch_matmul" or tiled_batch_matmul(
        E.shape(op.operands[0]), E.shape(op.operands[1]))) for op, inside in zip(ops, looped)]
    if not all(tiled):
        for op, keep in zip(ops, tiled):
            if keep:
                E.mark(op, HINT)
    if any(looped):
        for op in E.ops_named(module, "linalg.transpose"):
            if not E.in_loop(op):
                E.barrier_into(op.results[0], ("scf.for",))
    return tiled.count(False)
