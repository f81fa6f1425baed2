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
router: its step graph ran eagerly); and through elementwise ops: the
barrier goes on the gather's source, so IREE fuses the slice and the
conversion between them into a dispatch of their own (``x[::2].float()[idx]``,
fuzzer seed 94 of the corpus).
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
_DEPTH = 16  # producers walked back from a gather's source


def _sliced(source):
    """The ``tensor.extract_slice`` that ``source`` is made from, through
    reshapes (``x[:, 0]``: a ``[n, 1]`` slice collapsed to ``[n]``) and
    elementwise ops (``x[::2].float()[idx]``: IREE fuses the conversion
    and the slice into the gather just the same), or None."""
    todo, seen = [source], 0
    while todo and seen < _DEPTH:
        made = E.producer(todo.pop())
        seen += 1
        if made is None:
            continue
        if made.name == "tensor.extract_slice":
            return made
        if made.name in _RESHAPES:
            todo.append(made.operands[0])
        elif made.name == "linalg.generic" and _elementwise(made):
            todo.extend(made.operands[:len(made.operands) - len(made.results)])
    return None


def _elementwise(op) -> bool:
    """All loops parallel, no gather of its own (IREE fuses such a producer
    into its consumer's dispatch)."""
    kinds = str(op.attributes["iterator_types"])
    if "reduction" in kinds:
        return False
    body = op.regions[0].blocks[0]
    return not any(inner.operation.name == "tensor.extract" for inner in body.operations)


def count_in(linalg_text: str) -> int:
    """How many gather sources a printed module passes through a barrier
    (a slice, or a reshape of one)."""
    return sum(linalg_text.count(f'"{E.FUSION_BARRIER}"(%{name}')
               for name in ("extracted_slice", "collapsed", "expanded"))
