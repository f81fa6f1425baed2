"""A scatter writes into a tensor of its own when its destination is read
elsewhere too (a linalg-stage pass, every target).

``tm_tensor.scatter`` (``index_put``, ``scatter``, ``x[i] = v``) updates its
``outs`` tensor in place. When that tensor is also read by another op, IREE
3.13 must copy it first, and misses the copy when the two uses reach the
tensor through a reshape (its own unit-dimension folding makes one: a
``[1]``-shaped clamp computed as 0-d). Its scheduler then ran the scatter
before the other reader, which read the scattered values, silently: fuzzer
seeds 400128 (``v3 = v2 & v0`` then ``v2.index_put_(...)``: ``v3`` came
back computed from the written ``v2``) and 400151 (``torch.stack([v0, v0])``
then ``v0.scatter_(...)``: the stack held the scattered ``v0``), each only
when another program shared its graph and changed IREE's schedule. Here such
a scatter's destination is passed through a copy (``linalg_edit.copy_before``):
the copy IREE would have to make, made explicit. Not a ``linalg.copy``:
IREE erased that as an identity op, and the copy it then made itself
(copy-on-write of the scatter's tied operand) its scheduler ran after the
scatter: fuzzer seed 56 under ``lm.jit`` with its indices clamped (an
``index_select`` of a transposed view returned, then ``scatter_`` into the
same storage: the returned rows came back scattered, silently). A
destination read by nothing else is left as it is (a gradient's ``zeros``
accumulated into: no copy). The copy is
kept out of the scatter's dispatch (``linalg_edit.FUSION_BARRIER``): fused
into it, a copy of a slice of an argument failed IREE's codegen ("write
affecting operations on global resources are restricted to workgroup
distributed contexts"; fuzzer seeds 400055, 400214, 500053: ``index_put_``
into ``x[1]``, ``x[-1]``, a ``chunk`` of ``x`` under ``lm.jit`` and
``torch.compile``, whose graphs ran eagerly). A scatter of no
updates is its destination: IREE 3.13's compiler crashed on one
(``getMainTensorForLinalgExtOp``, SIGSEGV; fuzzer seed 400301, ``abs_`` of an
empty split of an empty ``diagonal``), and the graph ran eagerly.

An ``insert_slice`` (a write through a view) is updated in place the same
way; when its destination is also read through a slice of it elsewhere,
IREE 3.13 could run the insert before that read: fuzzer seed 800230 (a
strided view written, ``tanh`` of it, the view zeroed: ``tanh`` came back 0,
silently, on the lazy device). Read directly, it is not ordered either:
fuzzer seed 801224 (a bool ``index_put_`` through one view, ``v0 + False``
read, then ``v0[-1].zero_()``: the sum came back with the zero written,
silently) came to ``%d = generic(...); %i = insert_slice %c into %d[..]``
with ``%d`` also returned; IREE 3.13 flattens the generic's dispatch (a
reshape of its result, as an elementwise dispatch of rank 2 or of a unit
dimension gets), runs the insert in place in ``%d``'s buffer, and schedules
the copy-on-write clone of ``%d`` (for the return) after the insert, in the
same command buffer, whenever another dispatch that touches neither runs
beside it (``y = x * 2; z = y.clone(); z[1].zero_(); w + w``: ``y`` came
back zeroed, float32 too). A reduction reading ``%d`` (a dispatch of its
own) ran after the insert the same way, 1-d too; an elementwise reader
fused into ``%d``'s dispatch did not. Neither the element type, nor a
dynamic offset, nor a constant source matters. So every such destination
read elsewhere, directly or through a view, gets its copy; a function
argument (ordered by IREE against the argument's write) does not, nor a
``tensor.empty`` or a destination read by nothing else.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

IN_PLACE = ("tm_tensor.scatter",)
MARK = "lazy_mlir.own_destination"


def _read_by_another(start, op, *, counting_start: bool = True) -> bool:
    """Whether ``start``, or any view of it, is used by an operation other
    than ``op`` and the views between; ``counting_start=False``: only the
    uses of its views count."""
    todo, seen = [start], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        for use in v.uses:
            owner = use.owner
            owner = owner.operation if hasattr(owner, "operation") else owner
            if owner == op.operation:
                continue
            if owner.name in E.TENSOR_VIEWS and use.operand_number == 0:
                todo.extend(owner.results)
            elif counting_start or v != start:
                return True
    return False


def _read_elsewhere(value, op) -> bool:
    """Whether the tensor ``value`` views, or any view of it, is used by an
    operation other than ``op`` and the views between."""
    return _read_by_another(E.viewed(value), op)


def _read_through_a_view(dest, op) -> bool:
    """Whether a view of ``dest`` (not ``dest`` itself) is read by an
    operation other than ``op`` and the views between."""
    return _read_by_another(dest, op, counting_start=False)


def _insert_read_elsewhere(dest, op) -> bool:
    """Whether the destination ``dest`` of the ``insert_slice`` ``op`` needs
    a copy of its own: read elsewhere, directly or through a view; a view of
    a function argument only when a view of it is read (IREE orders a direct
    read of the argument); never a ``tensor.empty`` (no values to keep:
    torch-mlir shares one empty among the ``outs`` of many ops, and
    ``torch.cat`` inserts into one)."""
    root = E.producer(E.viewed(dest))
    if root is None:
        return _read_through_a_view(dest, op)
    if root.name == "tensor.empty":
        return False
    return _read_elsewhere(dest, op)


def _barrier_made_updates(op) -> None:
    """Keep a scatter's updates (or an insert's source) out of its dispatch
    when a ``linalg.generic`` of no inputs makes them (torch-mlir's lowering of ``scatter_`` of
    ``ones``: indices and updates from one generic, the updates a constant
    it yields): IREE 3.13 scattered the generic's initial zeros instead
    (fuzzer seed 800256 under ``lm.jit`` and ``torch.compile``, silently:
    ``v[i].scatter_(0, j, ones)`` gave 0). Through a barrier it scatters
    the ones."""
    made = E.producer(op.operands[0])
    if made is not None and made.name == "linalg.generic" \
            and len(made.operands) == len(made.results):
        E.barrier_before(op, 0)


def _gathered(dest) -> bool:
    """Whether ``dest`` is made by a ``linalg`` op that reads an input other
    than element for element: a ``linalg.transpose``, or a ``linalg.generic``
    with an input map that is not the identity (an ``unfold``'s ``d3 + d2 *
    3``). Fused into the scatter's dispatch, IREE 3.13's codegen failed on
    them ("write affecting operations on global resources are restricted
    to workgroup distributed contexts": ``index_put_`` into an unfold of a
    strided view, or of a ``[1, 1]`` tensor, whose unit dims make a
    transpose; fuzzer seeds 980748, 970273; the graph ran eagerly). Kept
    out of the dispatch, they compile; a fill or an elementwise producer
    stays fused."""
    made = E.producer(dest)
    if made is None:
        return False
    if made.name == "linalg.transpose":
        return True
    if made.name != "linalg.generic":
        return False
    maps = [E.ir.AffineMapAttr(m).value for m in made.attributes["indexing_maps"]]
    inputs = len(made.operands) - len(made.results)
    return any(m != E.ir.AffineMap.get_identity(m.n_dims) for m in maps[:inputs])


def own_destinations(module) -> int:
    """Copy the destination of each in-place op of ``IN_PLACE`` that is read
    elsewhere too, and of each ``insert_slice`` whose destination is read
    elsewhere, directly or through a slice or reshape of it
    (``_insert_read_elsewhere``); returns how many."""
    count = 0
    for op in E.ops_named(module, "tensor.insert_slice"):
        dest = op.operands[1]
        if E.producer(dest) is not None and E.shape(dest) is not None \
                and _insert_read_elsewhere(dest, op):
            _barrier_made_updates(op)  # (seed 802320: a made source beside the copy)
            E.copy_before(op, 1)
            E.barrier_before(op, 1)
            E.mark(op, MARK)
            count += 1
    for name in IN_PLACE:
        for op in E.ops_named(module, name):
            _barrier_made_updates(op)
            index = len(op.operands) - 1  # (``outs``: the last operand)
            if E.elements(op.operands[0]) == 0:  # no updates: the destination as it is
                op.results[0].replace_all_uses_with(op.operands[index])
                op.erase()
                continue
            if E.shape(op.operands[index]) is None:
                continue
            if not _read_elsewhere(op.operands[index], op):
                if _gathered(op.operands[index]):
                    E.barrier_before(op, index)
                    E.mark(op, MARK)
                    count += 1
                continue
            E.copy_before(op, index)
            E.barrier_before(op, index)  # (the copy a dispatch of its own)
            E.mark(op, MARK)
            count += 1
    return count
