"""A product with a broadcast operand summed (or averaged) whole is reduced
in two steps (an fx pass).

IREE 3.13 reads ``sum(x * w)`` to a scalar, ``w`` broadcast along an outer
dim (``x [3, 5] * w [5]``), as a contraction with a 0-d accumulator and
fails to compile it: "'vector.contract' op invalid accumulator/result
vector shape", on every CPU. The whole graph then ran eagerly, every step:
a weighted loss (``binary_cross_entropy_with_logits(x, t, weight=w)``,
``((x - t) ** 2 * w).mean()``) is one of them. Summed over its last dim
first, then the rest, it compiles (a row of partial sums, then their sum).
Only such sums change (the order of their additions does).
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten


# whole reduction -> (over the last dim, over the rest): a mean of the rows'
# means is the mean (rows of one size)
_TWO_STEPS = {aten.sum.default: (aten.sum.dim_IntList, aten.sum.default),
              aten.sum.dim_IntList: (aten.sum.dim_IntList, aten.sum.default),
              aten.mean.default: (aten.mean.dim, aten.mean.default),
              aten.mean.dim: (aten.mean.dim, aten.mean.default)}


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _whole_sum_of_broadcast_product(node: fx.Node) -> bool:
    if node.op != "call_function" or node.target not in _TWO_STEPS:
        return False
    x, out = _val(node.args[0]), _val(node)
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or not isinstance(out, torch.Tensor) \
            or out.dim() != 0:
        return False
    mul = node.args[0]
    if mul.op != "call_function" or mul.target is not aten.mul.Tensor:
        return False
    shapes = [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in map(_val, mul.args)]
    return any(s is not None and s != tuple(x.shape) for s in shapes)


def whole_sums_in_two_steps(gm: fx.GraphModule) -> fx.GraphModule:
    """Rewrite in place; returns ``gm``."""
    graph, changed = gm.graph, False
    for node in list(graph.nodes):
        if not _whole_sum_of_broadcast_product(node):
            continue
        x = _val(node.args[0])
        dtype = node.kwargs.get("dtype")
        by_row, by_all = _TWO_STEPS[node.target]
        with graph.inserting_before(node):
            rows = graph.call_function(by_row, (node.args[0], [-1]),
                                       {"dtype": dtype} if dtype is not None else {})
            whole = graph.call_function(by_all, (rows,))
        rows.meta["val"] = x.new_empty(x.shape[:-1], dtype=dtype or _val(node).dtype)
        whole.meta["val"] = _val(node)
        node.replace_all_uses_with(whole)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.lint()
        gm.recompile()
    return gm
