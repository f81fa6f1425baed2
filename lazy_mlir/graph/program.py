"""Cutting a graph out of pending values.

``Graph.build(roots)`` walks from the values to compute back to device data,
collecting nodes in topological order and the device data they read. Its key
is a sha256 over each node's key and where each of its inputs comes from (the
n-th node's output or the n-th input), so graphs cut at different places never
share a key, and graphs that differ only in tensor contents always do.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from .ir import DeviceData, Node, Value


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[DeviceData]
    outputs: list[Value]
    key: str

    @staticmethod
    def build(roots: list[Value], leading: list[DeviceData] = (), extra=None) -> "Graph":
        """``leading``: data that become the first inputs, in this order
        (a jitted function's arguments), whether or not the graph reads them.
        ``extra(order)``: given the nodes walked from ``roots`` (id -> position),
        returns more Values to compute, appended to the outputs (the index
        checks this graph can compute, ``bounds.take_flag``)."""
        order: dict[int, int] = {}
        nodes: list[Node] = []
        inputs: dict[int, int] = {id(d): i for i, d in enumerate(leading)}
        input_data: list[DeviceData] = list(leading)
        h = hashlib.sha256()
        for d in leading:
            h.update(b"lead" + d.spec.signature().encode())

        def ref(v: Value) -> bytes:
            if v.data is not None:
                i = inputs.get(id(v.data))
                if i is None:
                    i = inputs[id(v.data)] = len(input_data)
                    input_data.append(v.data)
                return b"i%d%s;" % (i, v.spec.signature().encode())
            return b"n%d.%d;" % (order[id(v.node)], v.index)

        def walk(roots):
            for root in roots:
                if root.node is None or id(root.node) in order:
                    continue
                stack = [(root.node, False)]
                while stack:
                    node, expanded = stack.pop()
                    if id(node) in order:
                        continue
                    if expanded:
                        # One update per node (the same bytes as one per
                        # part), node inputs without a call to ``ref``.
                        parts = [node.key]
                        for v in node.flat:
                            if type(v) is not Value:
                                continue
                            if v.data is None:
                                parts.append(b"n%d.%d;" % (order[id(v.node)], v.index))
                            else:
                                parts.append(ref(v))
                        h.update(b"".join(parts))
                        order[id(node)] = len(nodes)
                        nodes.append(node)
                        continue
                    stack.append((node, True))
                    for v in reversed(node.flat):
                        if type(v) is Value and v.data is None and id(v.node) not in order:
                            stack.append((v.node, False))

        walk(roots)
        if extra is not None:
            more = [v for v in extra(order) if v is not None]
            if more:
                walk(more)
                roots = list(roots) + more
        h.update(b"|out:")
        for root in roots:
            h.update(ref(root))
        return Graph(nodes, input_data, roots, h.hexdigest())
