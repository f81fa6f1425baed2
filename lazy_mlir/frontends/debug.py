"""``lm.debug``: what a user asks when a graph recompiles or an op falls back.

- ``explain_recompiles()`` (or ``LAZY_MLIR_DEBUG=1``): every compile logs why.
- ``render_graph(tensors, "g.svg")``: a picture of a pending graph.
- ``explain_op("aten.convolution", target="cpu")``: how an op reaches the
  compiler (compiled, decomposed where and by what, or why it falls back).
"""
from __future__ import annotations

from ..graph.debug import explain_recompiles
from ..lazy.render import render_graph

__all__ = ["explain_op", "explain_recompiles", "render_graph"]


def explain_op(op, target: str = "cpu", config=None):
    """``ops.explain.explain_op`` with the target-specific rewrites of
    ``passes/`` registered (they register on import)."""
    from ..ops.explain import explain_op as explain
    from ..passes import conv_matmul, pool_elementwise  # noqa: F401
    return explain(op, target, config)
