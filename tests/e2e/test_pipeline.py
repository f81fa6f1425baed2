"""The staged API, pipeline configuration and project-owned passes."""
from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.config import ConfigError, PipelineConfig
from lazy_mlir.dialects.linalg_edit import FUSION_BARRIER
from lazy_mlir.pipeline.stages import IREE_PHASES
from lazy_mlir.targets import CPU_DATA_TILING
from e2e_helpers import train_classifier


def mlp(x, w1, w2):
    return F.linear(F.relu(F.linear(x, w1)), w2).log_softmax(-1)


ARGS = (torch.randn(4, 16), torch.randn(32, 16), torch.randn(10, 32))


def test_lowered_has_every_stage_with_provenance():
    lowered = lm.jit(mlp).lower(*ARGS)
    assert lowered.stages == ("fx", "torch", "torch-backend", "linalg",
                              *("iree-" + p for p in IREE_PHASES))
    assert "aten.mm" in lowered.as_text("fx") or "aten.addmm" in lowered.as_text("fx")
    assert re.search(r"torch\.aten\.(mm|linear|addmm)", lowered.as_text("torch"))
    assert "!torch.vtensor<[4,16],f32>" in lowered.as_text("torch-backend")
    assert "linalg.matmul" in lowered.as_text("linalg")
    assert "flow.dispatch" in lowered.as_text("iree-flow")
    assert "hal.executable" in lowered.as_text("iree-hal")
    assert "vm.module" in lowered.as_text("iree-vm")
    for name in ("fx", "torch", "torch-backend", "linalg"):
        prov = lowered.stage(name).provenance
        assert prov.seconds >= 0 and prov.built_by
    with pytest.raises(ValueError, match="unknown stage 'nope'; stages: fx, torch"):
        lowered.as_text("nope")


def test_compiled_runs_on_cpu_and_lazy_tensors():
    compiled = lm.jit(mlp).lower(*ARGS).compile()
    assert compiled.artifact[:2] == b"PK" and b"IREE" in compiled.artifact[:4096]  # vmfb zip
    assert compiled.stages[-1].name == "vmfb"
    assert "iree-compile" in compiled.stages[-1].provenance.built_by
    new = (torch.randn(4, 16), ARGS[1], ARGS[2])
    torch.testing.assert_close(compiled(*new), mlp(*new), rtol=1e-5, atol=1e-5)
    out = compiled(*(a.to("lazy") for a in new))
    assert out.device.type == "lazy"
    torch.testing.assert_close(out.cpu(), mlp(*new), rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError, match=r"expected float32\[4, 16\]"):
        compiled(torch.randn(5, 16), ARGS[1], ARGS[2])


def test_config_from_toml_and_errors(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('opt_level = 3\nlinalg_after = ["canonicalize"]\n'
                 '[iree_flags]\ncpu = ["--iree-opt-data-tiling"]\n')
    config = PipelineConfig.from_toml(f)
    assert config.opt_level == 3 and config.linalg_after == ("canonicalize",)
    assert config.flags_for("cpu") == ("--iree-opt-data-tiling",)
    assert config.key != PipelineConfig().key
    (tmp_path / "bad.toml").write_text("opt_level = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        PipelineConfig.from_toml(tmp_path / "bad.toml")
    with pytest.raises(ConfigError, match="unknown key.*valid keys"):
        PipelineConfig.from_dict({"opt_lvl": 1})
    with pytest.raises(ConfigError, match="input must be"):
        PipelineConfig(input="tosa")
    compiled = lm.jit(mlp).lower(*ARGS, config=config).compile()
    assert "--iree-opt-level=O3" in compiled.flags
    torch.testing.assert_close(compiled(*ARGS), mlp(*ARGS), rtol=1e-4, atol=1e-4)


def test_config_is_part_of_the_cache_key():
    x = torch.ones(7, 5)
    try:
        lm.set_config(PipelineConfig())
        (x.to("lazy") * 3).cpu()
        before = lm.metrics.counter_value("UncachedCompile")
        (x.to("lazy") * 3).cpu()
        assert lm.metrics.counter_value("UncachedCompile") == before
        lm.set_config(PipelineConfig(linalg_after=("canonicalize",)))
        torch.testing.assert_close((x.to("lazy") * 3).cpu(), x * 3)
        assert lm.metrics.counter_value("UncachedCompile") == before + 1
    finally:
        lm.set_config(None)


def test_bf16_mixed_precision_changes_ir_and_numerics():
    def f(a, b, k, w):
        return a @ b, F.conv2d(k, w)

    args = (torch.randn(8, 64), torch.randn(64, 8), torch.randn(1, 2, 8, 8),
            torch.randn(3, 2, 3, 3))
    ref = f(*args)
    lowered = lm.jit(f).lower(*args, config=PipelineConfig(mixed_precision="bf16"))
    linalg = lowered.as_text("linalg")
    # CHECK: linalg.matmul ins({{.*}}bf16>, {{.*}}bf16>) outs({{.*}}f32>)
    # Both products in bf16 with f32 accumulation: a @ b, and the convolution
    # as its im2col matmul (the cpu target rewrites every forward convolution:
    # passes/conv_matmul.py), [36 positions, 18 taps] x [18, 3 channels].
    bf16_matmuls = re.findall(r"linalg\.matmul ins\([^)]*xbf16>, [^)]*xbf16>\) outs\([^)]*xf32>\)",
                              linalg)
    assert len(bf16_matmuls) == 2
    assert "tensor<36x18xbf16>" in bf16_matmuls[1]
    assert "bf16" not in lm.jit(f).lower(*args).as_text("linalg")
    out = lowered.compile()(*args)
    for o, r in zip(out, ref):
        assert o.dtype == torch.float32
        err = (o - r).abs().max().item()
        assert 1e-6 < err < 0.05 * r.abs().max().item()  # bf16 operands, f32 accumulation


CONV_CASES = {
    # name: (input shape, weight shape, stride, padding, dilation, groups)
    "3x3": ((4, 8, 9, 9), (16, 8, 3, 3), 1, 0, 1, 1),
    "5x5-pad": ((2, 3, 12, 12), (6, 3, 5, 5), 1, 2, 1, 1),
    "stride2-pad": ((3, 8, 11, 10), (5, 8, 3, 3), 2, 1, 1, 1),
    "dilated": ((2, 4, 12, 12), (8, 4, 3, 3), 1, 2, 2, 1),
    "1x1": ((2, 32, 5, 5), (7, 32, 1, 1), 1, 0, 1, 1),
    "grouped": ((2, 8, 7, 7), (8, 2, 3, 3), 1, 1, 1, 4),
    "batch1": ((1, 1, 28, 28), (32, 1, 3, 3), 1, 0, 1, 1),
    "conv1d": ((3, 6, 20), (4, 6, 5), 2, 1, 1, 1),
    "conv3d": ((2, 3, 6, 6, 6), (4, 3, 3, 3, 3), 1, 1, 1, 1),
}


@pytest.mark.parametrize("name", CONV_CASES)
def test_cpu_convolutions_and_gradients_match_eager(name):
    """Forward, input and weight gradients against eager, with the cpu
    target's flags and data tiling (which small graphs go without unless
    the configuration names it)."""
    xs, ws, stride, padding, dilation, groups = CONV_CASES[name]
    dims = len(xs) - 2

    def step(x, w, b, dy):
        out = torch.ops.aten.convolution(x, w, b, [stride] * dims, [padding] * dims,
                                         [dilation] * dims, False, [0] * dims, groups)
        if groups > 1:  # torch-mlir 20261001 cannot lower a grouped convolution_backward
            return (out,)
        grads = torch.ops.aten.convolution_backward(
            dy, x, w, [ws[0]], [stride] * dims, [padding] * dims, [dilation] * dims, False,
            [0] * dims, groups, [True, True, True])
        return (out, *grads)

    g = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(xs, generator=g), torch.randn(ws, generator=g), torch.randn(ws[0])
    out = torch.ops.aten.convolution(x, w, b, [stride] * dims, [padding] * dims,
                                     [dilation] * dims, False, [0] * dims, groups)
    dy = torch.randn(out.shape, generator=g)
    config = PipelineConfig(iree_flags=(("cpu", CPU_DATA_TILING),))
    compiled = lm.jit(step).lower(x, w, b, dy, config=config).compile(target="cpu")
    assert all(f in compiled.compiled.flags for f in CPU_DATA_TILING)
    for got, want in zip(compiled(x, w, b, dy), step(x, w, b, dy)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_cpu_conv_of_a_spatially_transposed_square_input_matches_eager():
    """IREE 3.13's data-tiled convolutions (targets.CONV_DATA_TILING, off)
    got this wrong: the transpose fused into the packed conv input."""
    def f(x, w):
        return F.conv2d(x.transpose(2, 3) * 2, w)

    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(lm.jit(f).lower(x, w).compile(target="cpu")(x, w), f(x, w),
                               rtol=1e-4, atol=1e-4)


def test_failing_optional_flags_are_dropped_and_the_graph_compiled_again(caplog):
    from dataclasses import replace

    from lazy_mlir.targets import CPU
    bad = "--iree-no-such-option-for-this-test"  # iree-compile rejects it
    target = replace(CPU, flags=CPU.flags + (bad,), optional_flags=CPU.optional_flags + (bad,))
    lowered = lm.jit(mlp).lower(*ARGS)
    with caplog.at_level("WARNING", logger="lazy_mlir"):
        compiled = lowered.compile(target)
    assert bad not in compiled.compiled.flags
    assert "--iree-opt-data-tiling" not in compiled.compiled.flags
    assert "compiling it again without" in caplog.text and bad in caplog.text
    torch.testing.assert_close(compiled(*ARGS), mlp(*ARGS), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="iree-compile failed"):  # a required flag still fails
        lowered.compile(replace(target, optional_flags=()))


def test_cpu_data_tiles_a_graph_with_a_large_matmul_only():
    small = lm.jit(mlp).lower(*ARGS).compile("cpu")
    assert "--iree-opt-data-tiling" not in small.flags
    assert "largest matmul 2,048 multiply-adds" in small.compiled.stages[-1].provenance.built_by
    torch.testing.assert_close(small(*ARGS), mlp(*ARGS), rtol=1e-5, atol=1e-5)
    a, b = torch.randn(512, 1024), torch.randn(1024, 128)  # 2^26 multiply-adds

    def mm(a, b):
        return (a @ b).relu()
    big = lm.jit(mm).lower(a, b).compile("cpu")
    assert "--iree-opt-data-tiling" in big.flags
    assert "--iree-llvmcpu-enable-ukernels=all" in big.flags
    torch.testing.assert_close(big(a, b), mm(a, b), rtol=1e-4, atol=1e-4)


def test_conv_as_matmul_compiles_and_matches_eager():
    def step(x, w, b, dy):
        out = F.conv2d(x, w, b, padding=1)
        grads = torch.ops.aten.convolution_backward(
            dy, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
        return (out, *grads)

    args = (torch.randn(3, 8, 7, 7), torch.randn(16, 8, 3, 3), torch.randn(16),
            torch.randn(3, 16, 7, 7))
    lowered = lm.jit(step).lower(*args, config=PipelineConfig(conv_lowering="im2col"))
    assert "conv_matmul" in lowered.stage("fx").provenance.built_by
    assert "linalg.matmul" in lowered.as_text("linalg")
    assert "linalg.conv_2d" not in lowered.as_text("linalg")
    native = lm.jit(step).lower(*args, config=PipelineConfig(conv_lowering="native"))
    assert "linalg.conv_2d" in native.as_text("linalg")
    for got, want in zip(lowered.compile(target="cpu")(*args), step(*args)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_weight_gradient_in_batch_slices_compiles_and_matches_eager(monkeypatch):
    """The im2col weight gradient summed over batch slices through IREE:
    slices of 2 images of 5 (the last one image), three matmuls."""
    from lazy_mlir.passes import conv_matmul
    monkeypatch.setattr(conv_matmul, "WGRAD_CHUNK_BYTES", 2 * 7 * 7 * 9 * 8 * 4)
    monkeypatch.setattr(conv_matmul, "MIN_WGRAD_CHUNK_ROWS", 1)
    def wgrad(x, w, dy):
        return torch.ops.aten.convolution_backward(
            dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]

    args = (torch.randn(5, 8, 7, 7), torch.randn(16, 8, 3, 3), torch.randn(5, 16, 7, 7))
    lowered = lm.jit(wgrad).lower(*args, config=PipelineConfig(conv_lowering="im2col"))
    assert lowered.as_text("fx").count("aten.mm.default(") == 3
    torch.testing.assert_close(lowered.compile(target="cpu")(*args), wgrad(*args),
                               rtol=1e-4, atol=1e-4)


def test_iree_torch_input_path_matches_linalg_path():
    lowered = lm.jit(mlp).lower(*ARGS, config=PipelineConfig(input="torch"))
    assert lowered.stages[:3] == ("fx", "torch", "iree-input")
    assert "torch.aten" in lowered.as_text("torch")
    assert "linalg" in lowered.as_text("iree-input")  # IREE converted torch itself
    compiled = lowered.compile()
    assert "--iree-input-type=torch" in compiled.flags
    torch.testing.assert_close(compiled(*ARGS), mlp(*ARGS), rtol=1e-5, atol=1e-5)


def test_failed_pipeline_leaves_a_repro(tmp_path, monkeypatch):
    from lazy_mlir.dialects.runner import PipelineError, run_pipeline
    monkeypatch.setenv("LAZY_MLIR_DUMP_DIR", str(tmp_path))
    text = ('func.func @main(%arg0: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {\n'
            '  %0 = torch.operator "aten.no_such_op"(%arg0) : (!torch.vtensor<[2],f32>) '
            '-> !torch.vtensor<[2],f32>\n  return %0 : !torch.vtensor<[2],f32>\n}\n')
    with pytest.raises(PipelineError) as info:
        run_pipeline(text, "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)",
                     "linalg")
    msg = str(info.value)
    assert "repro:" in msg and str(tmp_path) in msg
    repro = info.value.repro
    assert (repro / "input.mlir").read_text() == text
    assert "torch-mlir-opt --pass-pipeline=" in (repro / "command.sh").read_text()


def _breaks_the_module(module):
    """A project edit that leaves the module invalid (a use with no definition)."""
    from lazy_mlir.dialects import linalg_edit
    ret = linalg_edit.ops_named(module, "func.return")[0]
    linalg_edit.call_instead(ret.operands[0].owner, "no_such_function", [])


def test_a_failed_edit_leaves_a_repro_that_names_it(tmp_path, monkeypatch):
    from lazy_mlir.dialects.runner import PipelineError, run_pipeline
    monkeypatch.setenv("LAZY_MLIR_DUMP_DIR", str(tmp_path))
    text = ("func.func @main(%arg0: !torch.vtensor<[2],f32>) -> !torch.vtensor<[2],f32> {\n"
            "  %0 = torch.aten.neg %arg0 : !torch.vtensor<[2],f32> -> !torch.vtensor<[2],f32>\n"
            "  return %0 : !torch.vtensor<[2],f32>\n}\n")
    pipeline = "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)"
    assert "linalg.generic" in run_pipeline(text, pipeline, "linalg", edit=None)
    with pytest.raises(PipelineError) as info:
        run_pipeline(text, pipeline, "linalg", edit=_breaks_the_module)
    command = (info.value.repro / "command.sh").read_text()
    assert "torch-mlir-opt --pass-pipeline=" in command
    assert "test_pipeline._breaks_the_module on the result" in command


def test_pipeline_config_from_environment(tmp_path):
    import os
    import subprocess
    import sys
    f = tmp_path / "p.toml"
    f.write_text('linalg_after = ["canonicalize"]\n[iree_flags]\ncpu = ["--iree-opt-level=O1"]\n')
    code = ("import lazy_mlir as lm\n"
            "from lazy_mlir.config import current_config\n"
            "c = current_config(); print(c.linalg_after, c.flags_for('cpu'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, LAZY_MLIR_PIPELINE=str(f)), check=True).stdout
    assert out.strip() == "('canonicalize',) ('--iree-opt-level=O1',)"


def _train_sgd(net, x_shape, device, momentum=0.9):
    """Three SGD steps of ``net`` (seeded, moved to ``device``) on one random
    batch of 5 classes; (losses, parameters on the host)."""
    torch.manual_seed(0)
    net = net().to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=momentum)
    x, y = torch.randn(*x_shape), torch.randint(0, 5, (x_shape[0],))
    losses = train_classifier(net, opt, [(x, y)] * 3, device)
    return losses, [p.detach().cpu() for p in net.parameters()]


def _train_matches_eager(net, x_shape, dump_to=None):
    """``_train_sgd`` on lazy (dumping every stage to ``dump_to``) and on cpu:
    losses and every parameter agree."""
    from lazy_mlir.pipeline import dump

    saved = list(dump._active)
    if dump_to is not None:
        dump.set_dumper(dump.Dumper(dump_to, dump.DEFAULT_STAGES))
    try:
        got = _train_sgd(net, x_shape, "lazy")
    finally:
        dump._active[:] = saved
    want = _train_sgd(net, x_shape, "cpu")
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-5)
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def _dumped_linalg(dump_dir) -> list[dict]:
    import json
    graphs = json.loads((dump_dir / "manifest.json").read_text())["graphs"]
    return [s for g in graphs for s in g["stages"] if s["name"] == "linalg"]


def test_padded_and_strided_convolutions_train_as_eager_does(tmp_path):
    """A 3x3 convolution with padding 1 (padded after the transpose to
    channels last) and one with stride 2 (its input gradient a stride-1
    convolution of the spread gradient, its weight gradient a matmul):
    losses and every weight match eager after three SGD steps."""
    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(4, 8, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 5))

    _train_matches_eager(net, (16, 4, 16, 16), tmp_path)
    text = "".join((tmp_path / s["file"]).read_text() for s in _dumped_linalg(tmp_path))
    assert "_p1x1x1x1" in text  # the first convolution's padding, after the transpose
    assert "linalg.conv_2d_nchw_fchw" not in text  # every convolution rewritten


def test_a_depthwise_convolution_trains_compiled():
    """Its weight gradient as torch-mlir lowers it does not verify, and the
    whole step ran eagerly; now nothing falls back and SGD matches eager."""
    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(),
            torch.nn.Flatten(), torch.nn.Linear(8 * 12 * 12, 5))

    lm.metrics.reset()
    _train_matches_eager(net, (8, 8, 12, 12))
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::")]


def test_convolutions_run_channels_last_in_a_training_step(tmp_path):
    """On cpu a stride-1 convolution with 3+ channels in and out, forward and
    input gradient, becomes IREE's channels-last convolution
    (``conv_channels_last``); the one-channel first layer is an im2col
    matmul; the weight gradients are split along the batch. Losses and the
    updated weights match eager."""
    def net():
        return torch.nn.Sequential(
            torch.nn.Conv2d(1, 16, 3), torch.nn.ReLU(),               # one channel in: im2col
            torch.nn.Conv2d(16, 6, 3, padding=1), torch.nn.ReLU(),    # channels last
            torch.nn.Flatten(), torch.nn.Linear(6 * 10 * 10, 5))

    _train_matches_eager(net, (16, 1, 12, 12), tmp_path)
    linalg = _dumped_linalg(tmp_path)
    rewritten = [s for s in linalg if "conv_channels_last (2 convolutions)" in s["built_by"]]
    assert rewritten, [s["built_by"] for s in linalg]
    text = (tmp_path / rewritten[0]["file"]).read_text()
    assert "linalg.conv_2d_nhwc_hwcf" in text and FUSION_BARRIER in text
    fx = (tmp_path / rewritten[0]["file"].replace("-linalg.mlir", "-fx.txt")).read_text()
    assert fx.count("aten.convolution.default") == 2  # c2's forward and input gradient
    # both weight gradients (16 x 9 and 6 x 144) are small: one batch matmul
    # each over 16 slices of one image (``split_k``), not a 1-workgroup matmul
    assert fx.count("aten.bmm.default(") == 2 and "[16, 100, 16]" in fx


def test_an_activation_pooled_channels_last_is_computed_channels_last():
    def net(x, w):
        y = torch.relu(F.conv2d(x, w))
        return F.max_pool2d(y, 2), y * 0.5  # read channels last (the pool) and first

    args = (torch.randn(2, 4, 10, 10), torch.randn(6, 4, 3, 3))
    lowered = lm.jit(net).lower(*args, config=PipelineConfig(conv_lowering="im2col"))
    assert "channels_last_pointwise" in lowered.stage("fx").provenance.built_by
    relus = [line for line in lowered.as_text("fx").splitlines() if "aten.relu" in line]
    assert len(relus) == 1 and "f32[2, 8, 8, 6]" in relus[0]  # [N, H, W, C]
    for got, want in zip(lowered.compile("cpu")(*args), net(*args)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
