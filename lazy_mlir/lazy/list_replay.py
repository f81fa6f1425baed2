"""A repeated list op recorded from what its last call decided.

An optimizer's update takes every parameter and its state in a few list ops a
step: capturable AdamW's step counters (``_foreach_add_(steps, 1)``) and the
fused update itself (``_fused_adamw_``, 4-5 tensors a parameter). Recording
one through ``record`` walks its tensors in Python several times (flatten,
value reads, the plan key and its hash, the caller's refusal checks): about
1 us a tensor, 0.1-0.2 ms a step each on the suite's tiny models. Every step
calls them with tensors of the same specs (the same tensors, or new
gradients of the same shapes), so the first recording's decisions hold again
when the facts they were made on hold. A ``Replay`` keeps them; ``values``
and ``replay`` check those facts in C-level passes over the lists (``map``
of attribute getters, ~15-30 ns a tensor):

- every tensor a lazy tensor that is no view (``values``);
- the values' specs equal to those recorded (compared by their ``key``
  ints), the call's constants equal by ``repr`` (what a plan key
  compares: ``1``, ``1.0`` and ``True`` differ), the same argument tree;
- the op not denied (no denied signature at all), no dry run, decompositions
  on (``record``'s own checks);
- and the caller's checks that depend on the tensors (distinct storages among
  the written ones, one dtype), again as C-level passes.

The node made is the one ``record`` makes from the op's plan (op, arguments,
tree, key, output specs), so graphs and their keys are unchanged. A Replay
holds no tensor (only specs and constants): it keeps nothing alive.
"""
from __future__ import annotations

from operator import attrgetter, is_

from .. import metrics
from ..config import current_config
from ..graph import debug
from ..graph.ir import Value, planned_node
from ..ops import support as _support
from .state import dry_run as _dry_run, list_replays as _replays
from .tensor import LazyTensor

_LAZY = {LazyTensor}
view_of = attrgetter("_view")
storage_of = attrgetter("_storage")
dtype_of = attrgetter("spec.dtype")  # (a lazy tensor's spec, kept in step with it)
_value_of = attrgetter("value")
_spec_key_of = attrgetter("spec.key")
_MAX = 256


class Replay:
    """One list op's record, for its next call (see the module docstring)."""

    __slots__ = ("op", "call_tree", "call_reprs", "specs", "tail", "tree", "node_specs",
                 "key", "counter", "extra")

    def __init__(self, op, call_tree, call_reprs, node, n: int, counter: str, extra):
        self.op = op
        self.call_tree = call_tree  # the call's argument tree (argtree.flatten's)
        self.call_reprs = call_reprs  # the call's constants, as repr strings
        self.specs = tuple(v.spec.key for v in node.flat[:n])  # its tensors' values' specs
        self.tail = node.flat[n:]  # the node's constants, after its n tensors
        self.tree = node.tree
        self.node_specs = node.specs
        self.key = node.key
        self.counter = counter
        self.extra = extra  # the caller's own facts (foreach: the written list's length)


def values(tensors: list) -> list | None:
    """The values of ``tensors`` when every one is a lazy tensor and no view,
    else None."""
    if set(map(type, tensors)) != _LAZY or any(map(view_of, tensors)):
        return None
    return list(map(_value_of, map(storage_of, tensors)))


def find(op, first) -> Replay | None:
    """The Replay kept for ``op`` called with ``first`` as its first tensor."""
    return _replays.get((id(op), id(first)))


def keep(op, first, call_tree, call_consts: list, before: list, outs, counter: str,
         extra=None) -> None:
    """Keep the record just made of ``op`` (called with ``first`` as its
    first tensor): ``before`` are the values its tensors had (in the node's
    argument order), ``outs`` the node's outputs, bare Values from its plan.
    Nothing is kept unless the node's arguments are exactly ``before`` and
    then constants only."""
    if type(outs) is not list or not outs or type(outs[0]) is not Value:
        return
    node = outs[0].node
    n = len(before)
    if (node is None or len(node.flat) < n or not all(map(is_, node.flat[:n], before))
            or any(type(a) is Value for a in node.flat[n:])
            or not all(type(o) is Value and o.node is node for o in outs)):
        return
    if len(_replays) >= _MAX:
        _replays.clear()
    _replays[(id(op), id(first))] = Replay(node.op, call_tree, list(map(repr, call_consts)),
                                           node, n, counter, extra)


def replay(r: Replay, call_tree, vals: list, call_consts: list) -> list[Value] | None:
    """The node ``r`` recorded, made again on ``vals`` (see ``values``), or
    None when a fact it was made on no longer holds."""
    if (call_tree != r.call_tree or tuple(map(_spec_key_of, vals)) != r.specs
            or list(map(repr, call_consts)) != r.call_reprs
            or _dry_run[0] is not None or _support.DENIED_SIGNATURES
            or not _support.op_is_supported(r.op) or not current_config().decompositions):
        return None
    where = debug.user_location() if debug.tracking_locations() else None
    outs = planned_node(r.op, vals + r.tail, r.tree, r.node_specs, r.key, where)
    metrics.counter_inc(r.counter)
    return outs
