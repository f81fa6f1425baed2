"""A long chain of additions becomes ``sum(stack(terms), 0)`` (an fx pass, per target).

The LSTM language model unrolls 32 time steps, so each recurrent weight's
gradient is a sum of 32 products that autograd accumulates one at a time:
``((g1 + g2) + g3) + ... + g32``. IREE 3.13 fuses the whole chain, with the
optimizer's update after it, into one elementwise dispatch that reads 34
tensors. They live in one buffer, so IREE binds it once and passes each
tensor's offset as a push constant (its binding fusion): 34 constants, 136
bytes. Vulkan guarantees only 128 bytes of push constants (lavapipe, most
mobile GPUs: ``maxPushConstantsSize`` 128) and IREE has no fallback for more
(no spilling to a buffer, no limit to give it), so the device refuses to load
the module: ``push_constant_ranges[0] end offset 136 exceeds device limit
128``. Turning binding fusion off (``--iree-scheduling-optimize-bindings=
false``) trades each constant for a binding: 36 storage buffers, over
lavapipe's ``maxPerStageDescriptorStorageBuffers`` of 32.

Stacked, the terms are one tensor: each product is written into its slice
(IREE writes a concatenation's operands in place) and one reduction reads
them, whatever the number of terms. Only chains of more than ``MAX_TERMS``
terms change. The CPU's reduction adds the terms in the chain's order (40
terms of mixed magnitudes: eager's sum bit for bit); a GPU's may not (a float
sum then differs from the chain's by rounding). IREE's CPU runtime takes at
most 32 bindings a dispatch, CUDA 16 (``targets.WIDE_SUM_TARGETS``).
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

MAX_TERMS = 16
"""The most terms left as a chain: with IREE's other operands of a fused
dispatch (an optimizer's state and scalars), well under the 32 push
constants (128 bytes) every Vulkan device has."""


def _is_plain_add(node) -> bool:
    """``a + b`` of two tensors of the result's shape and dtype (no alpha, no
    broadcast, no type promotion): the adds a chain may hold."""
    if not (isinstance(node, fx.Node) and node.op == "call_function"
            and node.target is aten.add.Tensor and len(node.args) == 2
            and node.kwargs.get("alpha", 1) == 1):
        return False
    out = node.meta.get("val")
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return False
    for a in node.args:
        v = a.meta.get("val") if isinstance(a, fx.Node) else None
        if not isinstance(v, torch.Tensor) or v.shape != out.shape or v.dtype != out.dtype:
            return False
    return True


def _terms(root: fx.Node, inner: list) -> list:
    """The terms of the chain ending at ``root``, in order; ``inner`` gets
    the adds inside it (each used only by the next)."""
    out = []
    for a in root.args:
        if _is_plain_add(a) and len(a.users) == 1:
            inner.append(a)
            out += _terms(a, inner)
        else:
            out.append(a)
    return out


def wide_sums_as_stack(gm: fx.GraphModule, max_terms: int = MAX_TERMS) -> fx.GraphModule:
    """Rewrite in place; returns ``gm``."""
    graph, erased = gm.graph, set()
    for node in reversed(list(graph.nodes)):
        if node in erased or not _is_plain_add(node):
            continue
        if any(_is_plain_add(u) and len(node.users) == 1 for u in node.users):
            continue  # not the end of its chain: its root rewrites it
        inner: list = []
        terms = _terms(node, inner)
        if len(terms) <= max_terms:
            continue
        out = node.meta["val"]
        with graph.inserting_before(node):
            stacked = graph.call_function(aten.stack.default, (terms, 0))
            summed = graph.call_function(aten.sum.dim_IntList, (stacked, [0]))
        stacked.meta["val"] = out.new_empty((len(terms), *out.shape))
        summed.meta["val"] = out.new_empty(out.shape)
        node.replace_all_uses_with(summed)
        for a in [node, *inner]:  # outermost first: each used only by the one erased before
            graph.erase_node(a)
            erased.add(a)
    if erased:
        graph.lint()
        gm.recompile()
    return gm
