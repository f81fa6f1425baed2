"""benchmarks/dispatch_profile.py: every dispatch is timed (inside the module
from IREE's device statistics, or alone), and one executable the module runs
several times (a weight gradient's batch slices share theirs) is counted once
per call."""
from __future__ import annotations

import shutil

import pytest

# The same matmul on two pairs of arguments: one executable, dispatched twice.
TWO_MATMULS = """
func.func @main(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>, %c: tensor<64x64xf32>,
                %d: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %p = linalg.matmul ins(%a, %b : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  %q = linalg.matmul ins(%c, %d : tensor<64x64xf32>, tensor<64x64xf32>)
                     outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %p, %q : tensor<64x64xf32>, tensor<64x64xf32>
}
"""


@pytest.fixture
def bench(load_benchmark):
    return load_benchmark("dispatch_profile")


@pytest.mark.skipif(shutil.which("iree-benchmark-module") is None,
                    reason="needs the IREE runtime tools")
@pytest.mark.parametrize("isolated", [False, True])
def test_a_reused_executable_is_counted_per_call(tmp_path, capsys, isolated, bench):
    mlir = tmp_path / "two_matmuls.mlir"
    mlir.write_text(TWO_MATMULS)
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    res = bench.profile(mlir, flags, threads=1, min_time=0.01, isolated=isolated)
    rows = {name: (ms, n, tiles) for name, ms, n, tiles in res["dispatches"]}
    matmuls = [name for name in rows if "matmul_64x64x64" in name]
    assert len(matmuls) == 1, rows
    ms, n, tiles = rows[matmuls[0]]
    assert n == 2 and ms > 0 and res["module_ms"] > 0
    assert (tiles is None) == isolated and (isolated or tiles >= 1)
    argv = [str(mlir), *(f"--flag={f}" for f in flags), "--threads", "1", "--min-time", "0.01"]
    assert bench.main(argv + (["--isolated"] if isolated else [])) == 0
    out = capsys.readouterr().out
    assert f"{len(rows)} executables, {sum(n for _, n, _ in rows.values())} dispatches" in out


def test_contractions_get_their_gflops(bench):
    """From the loop ranges in IREE's dispatch name: 2 x their product FLOPs."""
    gflops = bench.gflops
    assert gflops("main_dispatch_1_matmul_128x1024x1024_f32", 2.0) == "134"
    assert gflops("main_dispatch_31_batch_matmul_32x16x150x200_f32", 0.5) == "61"
    assert gflops("main_dispatch_5_conv_64x24x24x64x3x3x32_f32", 13.1) == "104"
    assert gflops("main_dispatch_3_matmul_like_8x64x288x512_f32", 1.0) == "151"
    assert gflops("_encoding_0_encode_43264x9xf32_to_43264x9xf32", 1.0) == ""
    assert gflops("main_dispatch_2_transpose_64x32x9_f32", 1.0) == ""


def test_empty_inputs_get_no_splat(bench):
    """iree-benchmark-module refuses ``0xf32=0`` (a splat into no elements): a
    step module's empty arguments (an optimizer's unused state) go as ``0xf32``."""
    inputs = bench._main_inputs(
        "func.func @main(%a: tensor<2x3xf32>, %b: tensor<0xf32>, %c: tensor<f32>, "
        "%d: tensor<4x0x2xi64>) -> tensor<f32> {")
    assert inputs == ["2x3xf32=0", "0xf32", "f32=0", "4x0x2xi64"]


def test_a_graph_that_calls_pytorchs_kernels_is_refused_with_its_switch(bench):
    """iree-benchmark-module cannot load lazy-mlir's host modules: the error
    names the switch that dumps the same graph without the calls."""
    with pytest.raises(SystemExit, match="LAZY_MLIR_HOST_ATTENTION=0 LAZY_MLIR_RNN=0"):
        bench.refuse_host_calls(
            "%0:4 = call @lazy_mlir_rnn.lstm_layer(%a) : ...\n"
            "%1 = call @lazy_mlir_attention.flash(%b) : ...\n")
    with pytest.raises(SystemExit, match="LAZY_MLIR_BLAS=0"):  # inside a wrapper's body
        bench.refuse_host_calls("%r = func.call @lazy_mlir_blas.matmul(%ad, %bd, %ta, %tb)")
    # A function of the module's own (passes/column_sums.py) is no host call.
    bench.refuse_host_calls("%2 = call @lazy_mlir_column_sum_1024x512_over1_to_512(%c)")
    bench.refuse_host_calls(TWO_MATMULS)
