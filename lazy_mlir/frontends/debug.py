"""``lm.debug``: what a user asks when a graph recompiles or an op falls back.

- ``explain_recompiles()`` (or ``LAZY_MLIR_DEBUG=1``): every compile logs why.
- ``render_graph(tensors, "g.svg")``: a picture of a pending graph.
"""
from __future__ import annotations

from ..graph.debug import explain_recompiles
from ..lazy.render import render_graph

__all__ = ["explain_recompiles", "render_graph"]
