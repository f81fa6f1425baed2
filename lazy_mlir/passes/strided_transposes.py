"""Transposes with far-apart reads are not fused with their producer (a
linalg-stage pass, cpu only).

IREE fuses an elementwise ``linalg.generic`` into the ``linalg.transpose``
that consumes it, and the fused dispatch reads the producer's operands along
the transpose's output rows. When neighbouring output elements lie 4 KiB or
more apart in the input (``FAR_BYTES``), those reads hit one cache set (4K
aliasing) and the dispatch ran at ~1 GB/s: the medium ResNet's batch-norm
gradient of its stem ([8, 64, 32, 32], channels first) fused with its
channels-last transpose for the weight gradient took 1.57 ms of a 36 ms step
module. Alone, IREE's transpose is tiled in vector blocks: the elementwise op
and the transpose apart took 0.23-0.34 ms against 2.0-2.8 fused
(``iree-benchmark-module``, 2 threads), and the whole step module went from
44.7 to 42.1 ms (in-process, alternated, medians of 10). With a barrier on
every transpose of an elementwise result, also the nearer ones (16 B-1 KiB
apart), the module ran 42.0 ms: the rule keeps to the far ones.
"""
from __future__ import annotations

import math
import re

from ..dialects import linalg_edit as E

FAR_BYTES = 4096
_BARRIER = re.compile(r'(%[\w.#]+) = "' + re.escape(E.FUSION_BARRIER) + '"')
_TRANSPOSED = re.compile(r"linalg\.transpose ins\((%[\w.#]+) ")


def unfuse_strided_transposes(module) -> int:
    """Put a fusion barrier between each transpose whose output rows read
    the input ``FAR_BYTES`` or more apart and the elementwise op that
    produces its input; returns how many."""
    count = 0
    for op in E.ops_named(module, "linalg.transpose"):
        source = op.operands[0]
        made_by = E.producer(source)
        perm, shape = E.i64_array(op, "permutation"), E.shape(source)
        if (made_by is None or made_by.name != "linalg.generic" or perm is None
                or shape is None or perm[-1] == len(perm) - 1):
            continue
        if "reduction" in str(made_by.attributes["iterator_types"]):
            continue
        apart = math.prod(shape[perm[-1] + 1:]) * E.element_bytes(source)
        if apart >= FAR_BYTES:
            E.barrier_before(op, 0)
            count += 1
    return count


def count_in(linalg_text: str) -> int:
    """How many transposes of a printed module read through a fusion barrier."""
    barriers = set(_BARRIER.findall(linalg_text))
    return sum(1 for v in _TRANSPOSED.findall(linalg_text) if v in barriers)
