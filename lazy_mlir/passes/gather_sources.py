"""The slice a gather reads is computed by a dispatch of its own (a
linalg-stage pass, every target).

A gather (``index_select``, ``x[idx]``, ``embedding``) lowers to a
``linalg.generic`` whose body reads its source with ``tensor.extract`` at
computed indices. Where that source is a ``tensor.extract_slice`` also
returned (a view the program keeps: ``unfold(-1, 1, 3)`` of a transposed
tensor, then ``index_select``), IREE 3.13 fuses the slice into the gather's
dispatch and its LLVM translation fails ("LLVM Translation failed for
operation: builtin.unrealized_conversion_cast", an ``i64 -> index`` cast it
left): ``lm.jit`` raised and ``torch.compile`` and the lazy device ran the
graph eagerly (fuzzer seed 400113). Here such a source passes through
``linalg_edit.FUSION_BARRIER`` for the gather: the slice is materialized
first (one copy of the slice, no value changes). The same where the
slice reaches the gather through reshapes: a column, ``x[:, 0][idx]``, is a
``[n, 1]`` slice collapsed to ``[n]`` (sweep hf/causal-lm/hunyuan_v1_moe's
router: its step graph ran eagerly).
"""
from __future__ import annotations

from ..dialects import linalg_edit as E


def barrier_gather_sources(module) -> int:
    """Put a ``FUSION_BARRIER`` between each ``tensor.extract_slice`` (or a
    reshape of one) and a ``linalg.generic`` that gathers from it
    (``tensor.extract`` in its body); returns how many."""
    count = 0
    for op in E.ops_named(module, "linalg.generic"):
        body = op.regions[0].blocks[0]
        sources = []
        for inner in body.operations:
            inner = inner.operation
            if inner.name == "tensor.extract":
                source = inner.operands[0]
                made = _sliced(source)
                if made is not None and made.operation.block == op.operation.block \
                        and source not in sources:
                    sources.append(source)
        for source in sources:
            E.barrier_value_for(op, source)
            count += 1
    return count


_RESHAPES = ("tensor.collapse_shape", "tensor.expand_shape")


def _sliced(source):
    """The ``tensor.extract_slice`` that makes ``source``, through reshapes
    (``x[:, 0]``: a ``[n, 1]`` slice collapsed to ``[n]``), or None."""
    made = E.producer(source)
    while made is not None and made.name in _RESHAPES:
        made = E.producer(made.operands[0])
    return made if made is not None and made.name == "tensor.extract_slice" else None


def count_in(linalg_text: str) -> int:
    """How many gather sources a printed module passes through a barrier
    (a slice, or a reshape of one)."""
    return sum(linalg_text.count(f'"{E.FUSION_BARRIER}"(%{name}')
               for name in ("extracted_slice", "collapsed", "expanded"))
