"""Negative ``dim`` arguments made non-negative before import.

torch-mlir 20261001 lowers ``scatter``/``scatter_add``/``scatter_reduce`` with
a negative ``dim`` by indexing out of bounds (a SIGSEGV in the linalg
pipeline, or a wrong answer). Every op whose ``dim`` counts the dimensions of
its ``self`` argument gets ``dim % rank``, the value PyTorch wraps it to.
"""
from __future__ import annotations

import functools

import torch
import torch.fx as fx

# Ops whose ``dim`` may equal ``self``'s rank (a new dimension): not normalized.
_NEW_DIM_OPS = ("unsqueeze", "unsqueeze_copy")


@functools.lru_cache(maxsize=None)
def _dim_position(op) -> int | None:
    """The position of an ``int dim`` argument counting ``self``'s dims."""
    if not isinstance(op, torch._ops.OpOverload) or op.__name__.split(".")[0] in _NEW_DIM_OPS:
        return None
    args = op._schema.arguments
    if not args or args[0].name != "self" or not isinstance(args[0].type, torch.TensorType):
        return None
    for i, a in enumerate(args):
        if a.name == "dim" and isinstance(a.type, torch.IntType):
            return i
    return None


def normalize_dims(gm: fx.GraphModule) -> fx.GraphModule:
    """Rewrite negative ``dim`` constants in place; returns ``gm``."""
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        i = _dim_position(node.target)
        if i is None:
            continue
        name = node.target._schema.arguments[i].name
        in_args = i < len(node.args)
        dim = node.args[i] if in_args else node.kwargs.get(name)
        self_val = getattr(node.args[0], "meta", {}).get("val") if node.args else None
        if type(dim) is not int or dim >= 0 or not isinstance(self_val, torch.Tensor):
            continue
        dim %= max(self_val.dim(), 1)
        if in_args:
            node.args = node.args[:i] + (dim,) + node.args[i + 1:]
        else:
            node.kwargs = {**node.kwargs, name: dim}
    gm.recompile()
    return gm
