"""A bool tensor compared with a number, or with a tensor of another dtype,
is converted first to the type eager compares in.

torch-mlir 20261001 gets two such comparisons wrong, silently:

- it folds ``aten.gt.Scalar`` (``ge``, ``lt``, ``le``, ``eq``, ``ne``) of a
  constant bool tensor (``full_like(b, True)``, ``ones_like``) reading the
  bit as a signed ``i1``: True is -1, so ``ones_like(b) > 0`` folded to
  False and ``== 1`` to False (fuzzer seed 802119: ``where(t > 0, t, b)``
  with ``t`` all True gave ``b``, in every mode);
- it lowers ``aten.gt.Tensor`` of a bool tensor and an int64 one (a number
  the lazy device lifts to a 0-d input: ``b > -1``) converting the int64
  to bool, so ``b > -1`` was False everywhere.

Eager promotes the two operands (``torch.result_type``) and compares there:
the bool operands are converted to that type here (a bool number compared
as int64), which gives eager's answer; IREE fuses the conversion into the
comparison.
"""
from __future__ import annotations

import torch
import torch.fx as fx

aten = torch.ops.aten

_NAMES = ("eq", "ne", "gt", "ge", "lt", "le")
SCALAR = tuple(getattr(aten, n).Scalar for n in _NAMES)
TENSOR = tuple(getattr(aten, n).Tensor for n in _NAMES)


def _val(arg):
    val = getattr(arg, "meta", {}).get("val")
    return val if isinstance(val, torch.Tensor) else None


def _compared_in(node: fx.Node):
    """The dtype eager compares ``node``'s operands in, where one is a bool
    tensor that must be converted to it; None otherwise."""
    a, b = node.args[:2]
    va = _val(a)
    vb = _val(b) if node.target in TENSOR else b
    if va is None or not isinstance(vb, (torch.Tensor, bool, int, float)):
        return None  # (a symbolic number: left as it is)
    bools = va.dtype is torch.bool or (isinstance(vb, torch.Tensor) and vb.dtype is torch.bool)
    if not bools:
        return None
    dtype = torch.result_type(va, vb)
    if dtype is torch.bool:  # (two bool tensors lower right; a bool number: as an int)
        return torch.int64 if node.target in SCALAR else None
    return dtype


def bool_compare_as_promoted(gm: fx.GraphModule) -> fx.GraphModule:
    """Convert the bool operands of comparisons in place; returns ``gm``."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SCALAR + TENSOR:
            continue
        dtype = _compared_in(node)
        if dtype is None:
            continue
        for x in {a for a in node.args[:2] if _val(a) is not None and _val(a).dtype is torch.bool}:
            with gm.graph.inserting_before(node):
                wide = gm.graph.call_function(aten._to_copy.default, (x,), {"dtype": dtype})
            wide.meta["val"] = x.meta["val"].to(dtype)
            node.replace_input_with(x, wide)
        changed = True
    if changed:
        gm.recompile()
    return gm
