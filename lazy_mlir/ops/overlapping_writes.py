"""Which element of ``src`` eager's ``as_strided_scatter`` leaves at each
position a view with overlapping elements writes, asked of eager itself on
int64 stand-ins, and the int64 constants that carry the answer into a
graph (used by ``lowering.as_strided_scatter``)."""
from __future__ import annotations

import functools
import math

import torch

aten = torch.ops.aten
_MAX_OVERLAPPING_WRITES = 1 << 16  # elements of ``src``: two int64 constants of that length


def int64_constant(values: list[int]):
    """``values`` as a 1-d int64 constant of the graph: a new tensor each
    trace, from numpy, through a ``clone`` (``torch.tensor`` inside the
    trace records a ``detach_`` torch-mlir refuses; see ``special._table``)."""
    import numpy
    return aten.clone.default(torch.from_numpy(numpy.array(values, dtype=numpy.int64)))


@functools.lru_cache(maxsize=256)
def eager_overlapping_writes(shape, size, stride, offset):
    """(flat positions of a contiguous tensor of ``shape`` that
    ``as_strided_scatter(.., size, stride, offset)`` writes, the flat index
    into ``src`` of the element each ends up holding), from the op itself
    run eagerly on int64 stand-ins (``src`` numbering its elements), outside
    the capture's tracing modes; None past ``_MAX_OVERLAPPING_WRITES``, or
    where eager refuses (a stride of 0: its error comes from the op run
    eagerly when the graph does)."""
    if math.prod(size) > _MAX_OVERLAPPING_WRITES:
        return None
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        base = torch.full(shape, -1, dtype=torch.int64)
        numbers = torch.arange(math.prod(size), dtype=torch.int64).reshape(size)
        try:
            out = torch.as_strided_scatter(base, numbers, size, stride, offset).reshape(-1)
        except RuntimeError:
            return None
        positions = (out >= 0).nonzero().reshape(-1)
        return positions.tolist(), out[positions].tolist()
