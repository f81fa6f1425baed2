"""Cutting a graph out of pending values.

``Graph.build(roots)`` walks from the values to compute back to device data,
collecting the nodes and the device data they read. The nodes keep the order
they were recorded in (a topological order: a node's inputs were recorded
before it), which IREE keeps: a value dies where the program stopped using
it. (A depth-first order from the outputs put every weight gradient at the
end of the backward, after all input gradients, so each activation it reads
stayed live until then: a checkpointed MLP's step needed 361 MB of transient
memory, 145 MB in recording order.) Its key
is a sha256 over each node's key and where each of its inputs comes from (the
n-th node's output or the n-th input), so graphs cut at different places never
share a key, and graphs that differ only in tensor contents always do.
"""
from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass

from .ir import DeviceData, Node, Value


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[DeviceData]
    outputs: list[Value]
    key: str
    # Its module runs on the thread that runs the graph, on one core: a
    # graph that runs while a step is being captured (``lazy.early_outputs``:
    # the rest of a split step, both parts of a step cut before its
    # backward) leaves the other core to the capture.
    on_calling_thread: bool = False

    @staticmethod
    def build(roots: list[Value], leading: list[DeviceData] = (), extra=None) -> "Graph":
        """``leading``: data that become the first inputs, in this order
        (a jitted function's arguments), whether or not the graph reads them.
        ``extra(order)``: given the nodes walked from ``roots`` (Node -> position),
        returns more Values to compute, appended to the outputs (the index
        checks this graph can compute, ``bounds.take_flag``)."""
        order: dict = {}  # Node -> its position (Nodes hash by identity)
        nodes: list[Node] = []
        inputs: dict[int, int] = {id(d): i for i, d in enumerate(leading)}
        input_data: list[DeviceData] = list(leading)
        h = hashlib.sha256()
        for d in leading:
            h.update(b"lead" + d.spec.signature().encode())

        def ref(v: Value) -> bytes:
            d = v.data
            if d is not None:
                i = inputs.get(id(d))
                if i is None:
                    i = inputs[id(d)] = len(input_data)
                    input_data.append(d)
                return b"i%d%s;" % (i, v.spec.signature().encode())
            return b"n%d.%d;" % (order[v.node], v.index)

        parts: list = []  # every node's key and input references, hashed at once

        add = parts.append

        def walk(roots):
            # In the order the nodes were recorded (~2 us per node of a
            # step's mark_step, the sort included).
            for node in sorted(_pending_nodes(roots, order), key=_recorded):
                add(node.key)
                for v in node.flat:
                    if type(v) is Value:
                        d = v.data
                        if d is None:
                            add(b"n%d.%d;" % (order[v.node], v.index))
                            continue
                        i = inputs.get(id(d))  # (``ref``, inline: ~2 per node)
                        if i is None:
                            i = inputs[id(d)] = len(input_data)
                            input_data.append(d)
                        add(b"i%d%s;" % (i, v.spec.signature().encode()))
                order[node] = len(nodes)
                nodes.append(node)

        walk(roots)
        if extra is not None:
            more = [v for v in extra(order) if v is not None]
            if more:
                walk(more)
                roots = list(roots) + more
        parts.append(b"|out:")
        parts.extend([ref(root) for root in roots])
        h.update(b"".join(parts))
        return Graph(nodes, input_data, roots, h.hexdigest())


_recorded = operator.attrgetter("serial")


def _pending_nodes(roots, done) -> list[Node]:
    """The nodes the pending ``roots`` need that are not in ``done``."""
    found: list[Node] = []
    seen = set(done)
    stack = [r.node for r in roots if r.data is None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        found.append(node)
        for v in node.flat:
            if type(v) is Value and v.data is None:
                stack.append(v.node)
    return found
