"""benchmarks/_roofline.py counts a step's multiply-adds as the math does,
the LSTM's included (PyTorch's flop counter has no formula for oneDNN's fused
RNN kernel, which eager runs on the CPU)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def roofline():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("_roofline", BENCH / "_roofline.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCH))


def _matmul_flops(m, n, k):
    return 2 * m * n * k


def test_an_lstm_step_counts_its_recurrent_and_input_matmuls(roofline):
    from lazy_mlir.models.real import SIZES, VOCAB, real_model
    rm = real_model("lstm", "tiny")
    d = SIZES["tiny"]
    tokens, h = d["batch"] * d["seq"], d["hidden"]
    # Each layer: the input and the recurrent product (4 gates) forward, and
    # backward each one's input and weight gradients; the head likewise.
    lstm = d["layers"] * 2 * 3 * _matmul_flops(tokens, 4 * h, h)
    head = 3 * _matmul_flops(tokens, VOCAB, h)
    got = roofline.step_gflop(rm) * 1e9
    # (the first time step's recurrent product with h0 = 0 may be skipped)
    assert got == pytest.approx(lstm + head, rel=0.02)


def test_the_floor_is_the_flops_at_the_rate_on_every_core(roofline):
    peak = {"gflops_per_core": 100.0}
    assert roofline.floor_ms(40.0, peak, cores=2) == pytest.approx(200.0)
