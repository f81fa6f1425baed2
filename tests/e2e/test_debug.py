"""Graph pictures and the recompile explainer."""
from __future__ import annotations

import logging
import shutil

import torch

import lazy_mlir as lm


def test_render_graph_dot_and_svg(tmp_path):
    x = torch.ones(3, 2).to("lazy")
    y = (x * 3).relu().sum(0)
    dot = lm.debug.render_graph([y])
    assert dot.startswith("digraph lazy {")
    for label in ("mul.Tensor", "relu.default", "sum.dim_IntList", "input 0\\nfloat32[3, 2]",
                  "output 0"):
        assert label in dot
    assert dot.count("->") >= 4
    if shutil.which("dot"):
        svg = tmp_path / "g.svg"
        lm.debug.render_graph(y, str(svg))
        assert "<svg" in svg.read_text() and "relu.default" in svg.read_text()
    lm.mark_step()


def test_explainer_names_the_difference_and_the_line(caplog):
    caplog.set_level(logging.WARNING, logger="lazy_mlir")
    lm.debug.explain_recompiles(True)
    try:
        for n in (17, 17, 19):
            t = torch.ones(n, 3).to("lazy")
            y = (t * 2).sum(0)  # EXPLAIN-LINE
            lm.mark_step()
            y.cpu()
    finally:
        lm.debug.explain_recompiles(False)
    messages = [r.getMessage() for r in caplog.records if "nearest compiled graph" in r.getMessage()]
    assert len(messages) == 1  # the second identical step was cached
    msg = messages[0]
    assert "shape differs" in msg and "float32[17, 3]" in msg and "float32[19, 3]" in msg
    line = next(i for i, l in enumerate(open(__file__), 1) if "EXPLAIN-LINE" in l and "(t *" in l)
    assert f"test_debug.py:{line}" in msg


def test_explainer_reports_dtype_and_constant_changes(caplog):
    caplog.set_level(logging.WARNING, logger="lazy_mlir")
    lm.debug.explain_recompiles(True)
    try:
        x = torch.ones(23).to("lazy")
        (x + 0).cpu()
        (x + 1).cpu()  # 0 and 1 are constants in the graph
        (x.double() + 1).cpu()
    finally:
        lm.debug.explain_recompiles(False)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "constant differs" in text
    assert "float64" in text
