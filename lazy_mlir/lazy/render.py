"""Pictures of pending graphs: ``render_graph(tensors)`` gives DOT (and SVG
when graphviz's ``dot`` is installed) of the graph behind lazy tensors."""
from __future__ import annotations

import html
import shutil
import subprocess

from ..graph.ir import Value
from ..graph.program import Graph
from .capture import value_of


def render_graph(tensors, path: str | None = None) -> str:
    """DOT of the pending graph computing ``tensors``; with ``path`` ending in
    .svg (and graphviz installed) also writes the picture. Returns the DOT."""
    if not isinstance(tensors, (list, tuple)):
        tensors = [tensors]
    values = [value_of(t) for t in tensors]
    graph = Graph.build([v for v in values if v.pending])
    ids = {}
    lines = ["digraph lazy {", '  node [shape=box, fontname="monospace", fontsize=10];']
    for i, d in enumerate(graph.inputs):
        ids[id(d)] = f"in{i}"
        lines.append(f'  in{i} [label="input {i}\\n{d.spec.signature()}", shape=ellipse];')
    for i, n in enumerate(graph.nodes):
        consts = [repr(a) for a in n.flat if type(a) is not Value]
        label = n.op.__name__ + ("\\n" + html.escape(", ".join(consts))[:60] if consts else "")
        label += "\\n" + ", ".join(v.spec.signature() for v in n.outputs)
        lines.append(f'  n{i} [label="{label}"];')
        for v in n.outputs:
            ids[id(v)] = f"n{i}"
        for v in n.inputs:
            src = ids.get(id(v.data)) if v.data is not None else ids.get(id(v))
            if src:
                lines.append(f"  {src} -> n{i};")
    for k, v in enumerate(graph.outputs):
        lines.append(f'  out{k} [label="output {k}", shape=ellipse];')
        lines.append(f"  {ids[id(v)]} -> out{k};")
    lines.append("}")
    dot = "\n".join(lines)
    if path:
        if path.endswith(".svg") and shutil.which("dot"):
            subprocess.run(["dot", "-Tsvg", "-o", path], input=dot.encode(), check=True)
        else:
            with open(path if not path.endswith(".svg") else path[:-4] + ".dot", "w") as f:
                f.write(dot)
    return dot
