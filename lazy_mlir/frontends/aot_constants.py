"""Divisions of constants in a torch.compile graph: computed by ATen.

On the lazy device a fill (``torch.full``, ``arange``, ...) is host data, a
graph input; in a Dynamo graph it is a node, so an op whose operands are all
fills reaches torch-mlir with constant operands, and torch-mlir's folders of
the division ops are wrong there (torch-mlir 20261001, ``TorchOps.cpp``):

- ``div.Tensor_mode`` on integers divides unsigned (its operands pass through
  ``unsign ? getZExtValue() : getSExtValue()``, whose common type is
  unsigned) and floors with C's truncating division:
  ``torch.div(full(7), full(-2), rounding_mode="trunc")`` gave 0 for -3 and
  ``"floor"`` gave -1 for -4, silently;
- ``remainder.Scalar`` (what its canonicalizer makes of ``remainder.Tensor``
  by a 0-d tensor) folds as ``fmod``/``srem``: the sign of the dividend, not
  the divisor's.

``fold_constant_divisions`` computes each such node whose inputs need no
graph input with ATen when the graph is compiled: it becomes a ``full`` of
its value, or, where its elements differ, a constant tensor of the module
(a ``get_attr``, as Dynamo's own constants). Runtime values never reach
these folders; they are lowered, not folded, and are right.
"""
from __future__ import annotations

import torch
from torch import fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .aot_empty import deterministic, replace_by_full, splat_value

aten = torch.ops.aten

# Ops whose torch-mlir folder is wrong for some constant operands.
WRONGLY_FOLDED = frozenset({
    aten.div.Tensor_mode, aten.div.Scalar_mode, aten.floor_divide.default,
    aten.floor_divide.Scalar, aten.remainder.Tensor, aten.remainder.Scalar,
    aten.fmod.Tensor, aten.fmod.Scalar,
})
MAX_CONSTANT_ELEMENTS = 1 << 16  # a larger result whose elements differ stays a node


def fold_constant_divisions(gm: fx.GraphModule) -> int:
    """Replace each node of ``WRONGLY_FOLDED`` whose inputs are constant by its
    value computed with ATen; returns how many were replaced."""
    constant = _constant_nodes(gm)
    values: dict = {}
    replaced = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in WRONGLY_FOLDED or node not in constant:
            continue
        try:
            with unset_fake_temporarily():
                value = _evaluate(gm, node, values)
        except Exception:  # noqa: BLE001 - ATen refuses it: left to the compiler, as before
            continue
        if not isinstance(value, torch.Tensor) or not _constant_node(gm, node, value):
            continue
        replaced += 1
    if replaced:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return replaced


def _constant_nodes(gm: fx.GraphModule) -> set:
    """The nodes computed from no graph input, by deterministic ops."""
    constant: set = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            constant.add(node)
        elif node.op == "call_function" and deterministic(node.target):
            inputs = node.all_input_nodes
            if all(n in constant for n in inputs):
                constant.add(node)
    return constant


def _evaluate(gm: fx.GraphModule, node: fx.Node, values: dict):
    """``node``'s value on the host (its constant inputs first, memoized)."""
    if node in values:
        return values[node]
    if node.op == "get_attr":
        value = getattr(gm, node.target)
    else:
        args, kwargs = fx.node.map_arg((node.args, node.kwargs),
                                       lambda n: _evaluate(gm, n, values))
        value = node.target(*args, **kwargs)
    values[node] = value
    return value


def _constant_node(gm: fx.GraphModule, node: fx.Node, value: torch.Tensor) -> bool:
    """Put ``value`` in ``node``'s place: a ``full`` where its elements are
    equal, else a module constant of up to ``MAX_CONSTANT_ELEMENTS``."""
    one = splat_value(value)
    if one is not None:
        replace_by_full(gm, node, value.shape, one, value.dtype)
    elif value.numel() <= MAX_CONSTANT_ELEMENTS:
        name = "_lazy_mlir_constant_0"
        while hasattr(gm, name):
            name = f"_lazy_mlir_constant_{int(name.rsplit('_', 1)[1]) + 1}"
        gm.register_buffer(name, value.contiguous())
        with gm.graph.inserting_before(node):
            new = gm.graph.get_attr(name)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
    else:
        return False
    gm.graph.erase_node(node)
    return True
