"""An integer number an op applies to a float tensor is passed as a float.

torch-mlir 20261001 folds ``aten.add.Scalar`` (``sub``, ``mul``, ``rsub``,
``remainder``, an ``add.Tensor``'s ``alpha``) of a constant float tensor
converting a negative integer as unsigned (a number also where the op
takes a Tensor: aot graphs' ``add.Tensor(x, -2)``): ``full_like(x, 0) + (-2)``
folded to 1.8e19 (fuzzer seed 802122 under torch.compile, whose graphs keep
numbers as constants: ``x.zero_(); x.add_(-2); x.expand(...).fill_(3)``
came back 0 for 3, silently). Eager converts such a number to the
tensor's float type before computing, so ``float(n)`` here changes no
value (an int64 rounds to a double as ``float`` rounds it).
"""
from __future__ import annotations

import torch
import torch.fx as fx


def _floating_self(node: fx.Node) -> bool:
    first = node.args[0] if node.args else None
    val = getattr(first, "meta", {}).get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point


def int_scalars_as_float(gm: fx.GraphModule) -> fx.GraphModule:
    """Pass each integer ``Scalar`` argument of an op on a float tensor as a
    float, in place; returns ``gm``."""
    changed = False
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) \
                or not _floating_self(node):
            continue
        schema = node.target._schema.arguments
        args = list(node.args)
        kwargs = dict(node.kwargs)
        for k, arg in enumerate(schema):
            if not isinstance(arg.type, (torch.NumberType, torch.TensorType)):
                continue  # (a Tensor argument: a number there is a wrapped scalar)
            where, key = (args, k) if k < len(args) else (kwargs, arg.name)
            value = where[key] if k < len(args) or arg.name in kwargs else None
            if type(value) is int:
                where[key] = float(value)
                changed = True
        node.args, node.kwargs = tuple(args), kwargs
    if changed:
        gm.recompile()
    return gm
