"""What the graph of a host read computes besides the values read.

A read (``.item()``, ``.cpu()``, a branch on a value) launches the graph of
the values it needs; every other pending tensor stays pending. A loop that
reads a value each step and carries state forward (``generate()`` checks for
finished sequences each token while its KV cache and position ids grow) then
never computes that state: each step's graph recomputed every earlier step
(a tiny GPT-2: 216 nodes for the first token, 1,035 for the sixth) and
compiled anew. So a read's graph also outputs

- the live tensors whose values it computes anyway (``computed_anyway``), and
- the live tensors a few nodes away from it and from data: the state a loop
  updates after its read, such as ``cat([ids, new])``. A larger pending
  computation (the rest of a training step) stays pending.

What a mark_step computes is unchanged; a graph's own intermediates that no
live tensor holds are not outputs.
"""
from __future__ import annotations

from ..graph.ir import Value
from .tensor import live_storages

READY_NODES = 16  # at most this many nodes more per live tensor


def extra_outputs(order: dict, roots: list[Value]) -> tuple[list[Value], dict]:
    """The live pending values that a graph over ``order`` (Node -> position)
    also outputs, and the nodes they add to it (Node -> None)."""
    if not order:
        return [], {}
    seen = {id(v) for v in roots}
    anyway, candidates = [], []
    for storage in list(live_storages):
        v = storage.value
        if v.data is not None or id(v) in seen:
            continue
        seen.add(id(v))
        (anyway if v.node in order else candidates).append(v)
    added: dict = {}
    ready = [v for v in candidates if _add_if_near(v, order, added)]
    return anyway + ready, added


def _add_if_near(v: Value, order: dict, added: dict) -> bool:
    """Whether ``v`` needs at most READY_NODES nodes beyond ``order`` and
    ``added``; if so they join ``added``."""
    new: dict = {}
    stack = [v.node]
    while stack:
        node = stack.pop()
        if node in order or node in added or node in new:
            continue
        if len(new) == READY_NODES:
            return False
        new[node] = None
        for x in node.flat:
            if type(x) is Value and x.data is None:
                stack.append(x.node)
    added.update(new)
    return True
