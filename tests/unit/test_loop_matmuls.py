"""``passes/loop_matmuls``: in a module with a matmul inside a loop, the cpu
target data-tiles only the matmuls outside loops (IREE would pack the loop's
weight at every iteration), and a transpose made outside a loop reaches it
unfolded; IREE computes what eager does."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects import linalg_edit as E
from lazy_mlir.dialects.torch_import import import_fx
from lazy_mlir.ops.loops import as_traced_loops, scan
from lazy_mlir.passes.loop_matmuls import HINT
from lazy_mlir.pipeline.stages import Provenance, Stage, lower_torch
from lazy_mlir.targets import CPU

STEPS, B, H = 6, 2, 8


def recurrence(x, h, w, head):
    """``h = tanh(x[t] + h @ w^T)``, then ``h @ (w^T)^T`` through a transpose
    made before a second loop, and a matmul after the loops."""
    def forward(carries, rows, consts):
        h = torch.tanh(rows[0] + F.linear(carries[0], consts[0]))
        return (h,), (h,)

    def back(carries, rows, consts):
        g = torch.tanh(rows[0] + F.linear(carries[0], consts[0]))
        return (g,), ()
    (h,), (hs,) = scan(forward, STEPS, (h,), (x,), (w,), ((B, H),))
    (g,), _ = scan(back, STEPS, (h,), (x,), (w.t().contiguous(),), (), reverse=True)
    return hs.reshape(-1, H) @ head, g


def eager(x, h, w, head):
    hs = []
    for t in range(STEPS):
        h = torch.tanh(x[t] + h @ w.t())
        hs.append(h)
    g = h
    for t in range(STEPS - 1, -1, -1):
        g = torch.tanh(x[t] + g @ w)
    return torch.stack(hs).reshape(-1, H) @ head, g


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(STEPS, B, H, generator=g), torch.randn(B, H, generator=g),
            torch.randn(H, H, generator=g) * 0.3, torch.randn(H, 3, generator=g))


def _linalg(fn, target="cpu") -> str:
    gm = make_fx(as_traced_loops(fn), tracing_mode="fake")(*_inputs())
    torch_text = str(import_fx(gm))
    return lower_torch(Stage("torch", torch_text, Provenance("test", 0.0)), PipelineConfig(),
                       target)[-1]


def test_only_matmuls_outside_loops_are_data_tiled_and_results_match_eager():
    stage = _linalg(recurrence)
    text = stage.text
    assert "loop_matmuls" in stage.provenance.built_by
    matmuls = [line for line in text.splitlines() if "linalg.matmul" in line]
    hinted = [line for line in matmuls if HINT in line]
    assert len(matmuls) == 3 and len(hinted) == 1 and "3xf32" in hinted[0]
    assert text.count(f'"{E.FUSION_BARRIER}"') == 1  # w^T into the second loop
    flags = ["--iree-hal-target-backends=llvm-cpu", *CPU.flags]
    stream = ic.compile_str(text, extra_args=flags + ["--compile-to=stream"]).decode()
    dispatches = {line.split("::@")[1].split()[0] for line in stream.splitlines()
                  if "stream.cmd.dispatch @" in line}
    # packs for the head's matmul (12x8 @ 8x3) only, none for the loops' 8x8 weight
    encodes = {d for d in dispatches if "_encode_" in d}
    assert encodes and not any(f"encode_{H}x{H}x" in e for e in encodes), encodes
    # w^T made once, before the second loop (the two transposes not folded)
    assert any(f"transpose_{H}x{H}_" in d for d in dispatches), dispatches
    module = rt.load_vm_flatbuffer(ic.compile_str(text, extra_args=flags), driver="local-sync")
    for got, want in zip(module.main(*[a.numpy() for a in _inputs()]), eager(*_inputs())):
        np.testing.assert_allclose(got.to_host(), want.numpy(), rtol=1e-5, atol=1e-5)


def test_modules_without_a_loop_matmul_are_left_alone():
    def plain(x, h, w, head):
        return (x.reshape(-1, H) @ w) @ head, h
    stage = _linalg(plain)
    assert HINT not in stage.text and "loop_matmuls" not in stage.provenance.built_by
    assert HINT not in _linalg(recurrence, target="vulkan").text  # the cpu target only
