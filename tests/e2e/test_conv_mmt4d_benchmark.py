"""benchmarks/conv_mmt4d.py: its two forms of a convolution (im2col + data-
tiled matmul, packed gather + linalg.mmt4d) compile with IREE and agree."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "conv_mmt4d.py"


@pytest.mark.skipif(shutil.which("iree-benchmark-module") is None,
                    reason="needs the IREE runtime tools")
def test_both_forms_agree_on_a_small_convolution(capsys):
    spec = importlib.util.spec_from_file_location("conv_mmt4d", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--batch", "2", "--size", "10", "--channels", "16", "32",
                     "--min-time", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "forward:" in out and "weight grad:" in out
