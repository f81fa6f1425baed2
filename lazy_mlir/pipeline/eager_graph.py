"""A captured graph run op by op on host tensors, without an fx module.

``to_fx`` gives every node a fake tensor and generates the module's code:
~70 ms for a graph of 150 ops on a loaded 2-core host, paid at every new
graph. A graph that runs eagerly once and is never compiled (a storm's first
sight, ``compile_service/first_sight.py``) needs none of that: this calls
each node's aten op on the host tensors, in the captured order, as the fx
module would.
"""
from __future__ import annotations


from ..graph.argtree import unflatten
from ..graph.program import Graph
from .fx_graph import _returns_single_tensor, resolve


def eager_runner(graph: Graph):
    """A callable ``(*input tensors) -> output tensors`` computing ``graph``
    eagerly (a subgraph node by its CPU kernel: its template's fx module)."""
    nodes, inputs, outputs = graph.nodes, graph.inputs, graph.outputs

    def run(*tensors):
        env = {id(data): t for data, t in zip(inputs, tensors)}

        def lookup(v):
            return resolve(env, v)

        for node in nodes:
            args, kwargs = unflatten([lookup(a) for a in node.flat], node.tree)
            out = node.op(*args, **kwargs)
            if _returns_single_tensor(node.op):
                env[id(node.outputs[0])] = out
            else:
                for v in node.outputs:
                    env[id(v)] = out[v.index]
        return tuple(lookup(v) for v in outputs)
    return run
