"""A chain of ``view(dtype)``s reads its first tensor's bytes (an fx pass,
run before decomposition: ``pipeline/fx_graph.decompose``)."""
from __future__ import annotations

import torch
import torch.fx as fx


def fold_view_dtype_chains(gm: fx.GraphModule) -> None:
    """``view(view(x, A), B)`` read as ``view(x, B)`` (``alias`` and ``detach`` nodes
    between too): the same bytes, and no bool between (a bool view of
    wider bytes is decomposed as ``!= 0``, ``ops/compile_gaps.bool_bytes``,
    which keeps no byte: viewed back, a float's bytes through a bool view
    came back as 0 and 1)."""
    aten = torch.ops.aten
    same_bytes = {aten.view.dtype, aten.alias.default, aten.detach.default}
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.view.dtype:
            continue
        src = node.args[0]
        while isinstance(src, fx.Node) and src.op == "call_function" and src.target in same_bytes:
            src = src.args[0]
        if src is not node.args[0]:
            node.args = (src, *node.args[1:])
            changed = True
    if changed:
        gm.recompile()
