"""``passes/data_tiling``: in a module with a matmul inside a loop, the cpu
target data-tiles only the matmuls outside loops (IREE would pack the loop's
weight at every iteration), and a transpose made outside a loop reaches it
unfolded; a batch of small matmuls (attention) is not data-tiled beside a large
matmul; IREE computes what eager does."""
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
from lazy_mlir.passes.data_tiling import HINT, tiled_batch_matmul
from lazy_mlir.pipeline.stages import Provenance, Stage, iree_flags, lower_torch
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
    assert "data_tiling" in stage.provenance.built_by
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


def test_modules_without_a_loop_or_a_small_batch_matmul_are_left_alone():
    def plain(x, h, w, head):
        return (x.reshape(-1, H) @ w) @ head, h
    stage = _linalg(plain)
    assert HINT not in stage.text and "data_tiling" not in stage.provenance.built_by
    assert HINT not in _linalg(recurrence, target="vulkan").text  # the cpu target only


def attention_and_projection(q, k, x, w):
    """A batch of small matmuls (attention scores) beside a large matmul."""
    return torch.softmax(q @ k.transpose(1, 2), -1), x @ w


def _attention_inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(8, 32, 16, generator=g), torch.randn(8, 32, 16, generator=g),
            torch.randn(1024, 512, generator=g), torch.randn(512, 256, generator=g) / 20)


def test_a_batch_of_small_matmuls_is_not_data_tiled_beside_a_large_matmul():
    gm = make_fx(attention_and_projection, tracing_mode="fake")(*_attention_inputs())
    stage = lower_torch(Stage("torch", str(import_fx(gm)), Provenance("test", 0.0)),
                        PipelineConfig(), "cpu")[-1]
    text = stage.text
    assert "data_tiling" in stage.provenance.built_by
    batch = [line for line in text.splitlines() if "linalg.batch_matmul" in line]
    matmul = [line for line in text.splitlines() if "linalg.matmul" in line]
    assert len(batch) == 1 and HINT not in batch[0]
    assert len(matmul) == 1 and HINT in matmul[0]
    flags = iree_flags(CPU, PipelineConfig(), (stage,))
    assert "--iree-opt-data-tiling" in flags  # the large matmul keeps the graph data-tiled
    stream = ic.compile_str(text, extra_args=flags + ["--compile-to=stream"]).decode()
    encodes = {line.split("::@")[1].split()[0] for line in stream.splitlines()
               if "stream.cmd.dispatch @" in line and "_encode_" in line}
    # packs of x and w, none of the attention's 8x32x16 operands
    assert any("encode_1024x512" in e for e in encodes), encodes
    assert not any("encode_8x" in e for e in encodes), encodes
    module = rt.load_vm_flatbuffer(ic.compile_str(text, extra_args=flags), driver="local-sync")
    got = module.main(*[a.numpy() for a in _attention_inputs()])
    for g, want in zip(got, attention_and_projection(*_attention_inputs())):
        np.testing.assert_allclose(g.to_host(), want.numpy(), rtol=1e-4, atol=1e-4)


def test_which_batch_matmuls_are_worth_their_packs():
    assert not tiled_batch_matmul([64, 128, 64], [64, 64, 128])  # attention, 128 positions
    assert tiled_batch_matmul([64, 65, 64], [64, 64, 65])  # rows not in whole vectors: padded
    assert tiled_batch_matmul([64, 128, 64], [64, 64, 120])  # nor columns
    assert tiled_batch_matmul([4, 1024, 512], [4, 512, 1024])  # 2^29 a matmul
    assert not tiled_batch_matmul([4, 512, 1024], [4, 1024, 512])  # 2^28
    assert tiled_batch_matmul(None, [4, 512, 1024])  # dynamic: IREE's default
