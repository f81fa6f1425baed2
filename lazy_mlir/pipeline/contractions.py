"""The size of a graph's largest matmul, read from its linalg IR.

The cpu target data-tiles a graph only when it has a large matmul
(``targets.Target.large_matmul_flags``): packing each operand into 16-wide
panels costs a copy per matmul, and the microkernels earn it back only on
big ones. A batch matmul of small matmuls does not count: the cpu target
never data-tiles it (``passes/data_tiling``). Read from the text, not the
bindings: ``linalg.matmul`` and ``linalg.batch_matmul`` print their operand
types in one fixed form.
"""
from __future__ import annotations

import math
import re

from ..passes.data_tiling import tiled_batch_matmul

# (an attribute dict may come first: ``passes/data_tiling``' hint)
_MATMUL = re.compile(r"linalg\.(batch_)?matmul (?:\{[^}]*\} )?"
                     r"ins\([^:]*: tensor<([0-9x]+)x[a-z]+[0-9]*>, "
                     r"tensor<([0-9x]+)x[a-z]+[0-9]*>")


def largest_matmul(linalg_text: str) -> int:
    """Multiply-adds of the largest static ``linalg.matmul`` or
    ``linalg.batch_matmul`` that the cpu target would data-tile (0 if none):
    the LHS's elements times the RHS's last dimension. Matmuls with indexing
    maps or dynamic sizes are not read."""
    best = 0
    for m in _MATMUL.finditer(linalg_text):
        lhs = [int(d) for d in m.group(2).split("x")]
        rhs = [int(d) for d in m.group(3).split("x")]
        if m.group(1) and not tiled_batch_matmul(lhs, rhs):
            continue
        best = max(best, math.prod(lhs) * rhs[-1])
    return best


def largest_fx_matmul(gm) -> int:
    """``largest_matmul`` read from an fx graph of static sizes (a size
    family's graph at its plan's sizes, whose module IREE lowers from the
    torch dialect: no linalg text to read): ``mm``, ``addmm``, ``bmm`` (a
    small batch matmul not counted, as there) and ``lazy_mlir::linear``."""
    import torch
    aten = torch.ops.aten
    operands = {aten.mm.default: (0, 1), aten.addmm.default: (1, 2),
                aten.bmm.default: (0, 1)}
    best = 0
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target in operands:
            lhs, rhs = (list(node.args[i].meta["val"].shape) for i in operands[node.target])
            if node.target is aten.bmm.default and not tiled_batch_matmul(lhs, rhs):
                continue
        elif str(node.target) == "lazy_mlir.linear.default":
            lhs = list(node.args[0].meta["val"].shape)
            rhs = list(node.args[1].meta["val"].shape)[::-1]  # (weight [N, K])
        else:
            continue
        best = max(best, math.prod(lhs) * rhs[-1])
    return best
