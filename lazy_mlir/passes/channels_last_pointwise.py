"""A pointwise op read channels last is computed channels last (an fx pass).

``conv_matmul`` and ``pool_elementwise`` read activations channels last
(``permute(x, [0, 2, 3, 1])``), but autograd saves the channels-first tensor
too: the MNIST CNN's ``relu(conv2)`` is pooled channels last and, in the
backward, masked channels first. IREE 3.13 then materializes the relu output
channels first (a 9.4 MB transpose dispatch, 1.5 ms) and the fused max-pool
and relu backward reads it with a channel stride (3.0 ms). Computing the
relu on the channels-last input and giving the other readers the permuted
view removed the transpose and brought the backward dispatch to 1.7-1.9 ms
(``benchmarks/dispatch_profile.py``), about 4% of the ~65 ms module; whole
modules paired by ``farm-bench`` (15 runs of ``iree-benchmark-module``, 40
calls each) ran in 0.95x and 0.99x the time, within this machine's noise.

Only ops tagged pointwise with one tensor argument are moved: they commute
with any permutation of it.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten
TO_LAST = [0, 2, 3, 1]
TO_FIRST = [0, 3, 1, 2]


def _channels_last_readers(node: fx.Node) -> list[fx.Node]:
    return [u for u in node.users if u.op == "call_function"
            and u.target is aten.permute.default and list(u.args[1]) == TO_LAST]


def _movable(node: fx.Node) -> bool:
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.pointwise not in op.tags or not node.args:
        return False
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 4:
        return False
    tensors = [a for a in (*node.args, *node.kwargs.values()) if isinstance(a, fx.Node)]
    return tensors == [node.args[0]]


def channels_last_pointwise(gm: fx.GraphModule) -> fx.GraphModule:
    """Rewrite in place; returns ``gm``."""
    graph, changed = gm.graph, False
    for node in list(graph.nodes):
        if not _movable(node):
            continue
        readers = _channels_last_readers(node)
        if not readers or len(readers) == len(node.users):  # nothing read channels first
            continue
        x = node.args[0]
        with graph.inserting_before(node):
            x_last = graph.call_function(aten.permute.default, (x, TO_LAST))
            last = graph.call_function(node.target, (x_last, *node.args[1:]), dict(node.kwargs))
            first = graph.call_function(aten.permute.default, (last, TO_FIRST))
        x_val = x.meta["val"]
        with x_val.fake_mode:
            x_last.meta["val"] = x_val.permute(TO_LAST)
            last.meta["val"] = node.target(x_last.meta["val"], *node.args[1:], **node.kwargs)
            first.meta["val"] = last.meta["val"].permute(TO_FIRST)
        for r in readers:
            r.replace_all_uses_with(last)
            graph.erase_node(r)
        node.replace_all_uses_with(first)
        graph.erase_node(node)
        changed = True
    if changed:
        gm.recompile()
    return gm
