"""bf16 mixed precision, like PyTorch/XLA's ``XLA_USE_BF16`` for compute.

An fx pass: matmuls and convolutions (forward and backward) take bf16
operands and return float32; everything else stays float32. torch-mlir lowers
bf16 matmul and convolution with a float32 accumulator (``linalg.matmul
ins(bf16, bf16) outs(f32)``), so only the operands lose precision.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

# op -> positions of the tensor operands to cast
_BF16_OPS = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 1),
    aten.addmm.default: (1, 2),
    aten.convolution.default: (0, 1),
    aten.convolution_backward.default: (0, 1, 2),
}


def _cast(graph: fx.Graph, node: fx.Node, dtype: torch.dtype) -> fx.Node:
    cast = graph.call_function(aten._to_copy.default, (node,), {"dtype": dtype})
    cast.meta["val"] = node.meta["val"].to(dtype)
    return cast


def bf16_mixed_precision(gm: fx.GraphModule) -> fx.GraphModule:
    """Rewrite ``gm`` in place; returns it. Only float32 ops are changed."""
    g = gm.graph
    for node in list(g.nodes):
        positions = _BF16_OPS.get(node.target)
        if positions is None:
            continue
        args = list(node.args)
        if not all(isinstance(args[i], fx.Node) and args[i].meta["val"].dtype == torch.float32
                   for i in positions if i < len(args)):
            continue
        with g.inserting_before(node):
            for i in positions:
                args[i] = _cast(g, args[i], torch.bfloat16)
            if node.target is aten.addmm.default:  # the bias is added in float32
                bias = args[0]
                mm = g.call_function(aten.mm.default, (args[1], args[2]))
                mm.meta["val"] = node.meta["val"].to(torch.bfloat16)
        with g.inserting_after(node):
            if node.target is aten.addmm.default:
                out = _cast(g, mm, torch.float32)
                total = g.call_function(aten.add.Tensor, (bias, out))
                total.meta["val"] = node.meta["val"]
                node.replace_all_uses_with(total)
                g.erase_node(node)
                continue
        node.args = tuple(args)
        old_val = node.meta["val"]
        node.meta["val"] = _to_bf16(old_val)
        if isinstance(old_val, torch.Tensor):
            _cast_uses_back(g, node)
        else:  # a tuple: each getitem user gets its own cast back
            for item in list(node.users):
                item.meta["val"] = _to_bf16(item.meta["val"])
                _cast_uses_back(g, item)
    gm.recompile()
    return gm


def _cast_uses_back(g: fx.Graph, node: fx.Node) -> None:
    users = list(node.users)
    with g.inserting_after(node):
        back = _cast(g, node, torch.float32)
    for u in users:
        u.replace_input_with(node, back)


def _to_bf16(val):
    if isinstance(val, torch.Tensor):
        return val.to(torch.bfloat16)
    if isinstance(val, (tuple, list)):
        return type(val)(_to_bf16(v) for v in val)
    return val
