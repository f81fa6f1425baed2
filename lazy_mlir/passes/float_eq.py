"""Float ``eq`` as ``not ne``, so ``x == x`` stays False where ``x`` is NaN.

torch-mlir 20261001 folds ``aten.eq.Tensor`` of a value with itself (also
through a ``clone``) to True, a wrong answer for NaN. ``ne`` is not folded,
and under IEEE 754 ``not (a != b)`` equals ``a == b`` for every pair of
floats, NaN included.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten


def _is_float(arg) -> bool:
    val = getattr(arg, "meta", {}).get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def float_eq_as_not_ne(gm: fx.GraphModule) -> fx.GraphModule:
    """Rewrite floating ``eq.Tensor`` nodes in place; returns ``gm``."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.eq.Tensor:
            continue
        if not any(_is_float(a) for a in node.args[:2]):
            continue
        with gm.graph.inserting_before(node):
            ne = gm.graph.call_function(aten.ne.Tensor, tuple(node.args[:2]))
            ne.meta["val"] = node.meta.get("val")
            out = gm.graph.call_function(aten.logical_not.default, (ne,))
            out.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(out)
        gm.graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return gm
