"""benchmarks/conv_mmt4d.py: its two forms of a convolution (im2col + data-
tiled matmul, packed gather + linalg.mmt4d) compile with IREE and agree."""
from __future__ import annotations

import shutil

import pytest


@pytest.mark.skipif(shutil.which("iree-benchmark-module") is None,
                    reason="needs the IREE runtime tools")
def test_both_forms_agree_on_a_small_convolution(capsys, load_benchmark):
    mod = load_benchmark("conv_mmt4d")
    assert mod.main(["--batch", "2", "--size", "10", "--channels", "16", "32",
                     "--min-time", "0.05"]) == 0
    out = capsys.readouterr().out
    assert "forward:" in out and "weight grad:" in out
