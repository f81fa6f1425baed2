"""``passes/strided_transposes``: on the cpu target, a transpose whose output
rows read its input 4 KiB apart is not fused with the elementwise op that
makes the input (IREE's fused code reads it at ~1 GB/s); nearer ones are
left alone, and IREE computes what eager does."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects.torch_import import import_fx
from lazy_mlir.passes.strided_transposes import count_in
from lazy_mlir.pipeline.stages import Provenance, Stage, iree_flags, lower_torch
from lazy_mlir.targets import CPU


def scale_then_channels_last(x, y, s):
    """A batch-norm-like gradient, channels first, then channels last."""
    return ((x - y) * s).permute(0, 2, 3, 1).contiguous()


def _inputs(side: int):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 16, side, side, generator=g), torch.randn(2, 16, side, side, generator=g),
            torch.randn(1, 16, 1, 1, generator=g))


def _linalg(side: int, target="cpu") -> Stage:
    gm = make_fx(scale_then_channels_last, tracing_mode="fake")(*_inputs(side))
    return lower_torch(Stage("torch", str(import_fx(gm)), Provenance("test", 0.0)),
                       PipelineConfig(), target)[-1]


def test_a_far_apart_transpose_reads_its_input_unfused_and_matches_eager():
    stage = _linalg(32)  # 32 x 32 floats: rows 4 KiB apart
    assert count_in(stage.text) == 1
    assert "strided_transposes (1 transposes unfused)" in stage.provenance.built_by
    flags = iree_flags(CPU, PipelineConfig(), (stage,))
    stream = ic.compile_str(stage.text, extra_args=flags + ["--compile-to=stream"]).decode()
    dispatches = {line.split("::@")[1].split()[0] for line in stream.splitlines()
                  if "stream.cmd.dispatch @" in line}
    # the elementwise op and the transpose in dispatches of their own
    assert any("elementwise" in d and "transpose" not in d for d in dispatches), dispatches
    assert any("transpose" in d and "elementwise" not in d for d in dispatches), dispatches
    module = rt.load_vm_flatbuffer(ic.compile_str(stage.text, extra_args=flags),
                                   driver="local-sync")
    got = module.main(*[a.numpy() for a in _inputs(32)])
    np.testing.assert_allclose(got.to_host(), scale_then_channels_last(*_inputs(32)).numpy(),
                               rtol=1e-6, atol=1e-6)


def test_nearer_transposes_and_other_targets_are_left_alone():
    near = _linalg(16)  # rows 1 KiB apart: fused as IREE likes
    assert count_in(near.text) == 0 and "strided_transposes" not in near.provenance.built_by
    assert count_in(_linalg(32, target="vulkan").text) == 0
