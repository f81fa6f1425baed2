"""The column_sums linalg-stage pass: which sums over leading dimensions
become two-stage sums, that the cpu pipeline applies it, and that IREE's
module computes what torch's ``sum`` does."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import torch

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects.torch_import import parse
from lazy_mlir.passes import column_sums as cs
from lazy_mlir.pipeline.stages import _linalg_edits
from lazy_mlir.targets import CPU


def t(shape):
    return "tensor<" + "".join(f"{d}x" for d in shape) + "f32>"


def sum_op(name, shape, reduced, out, maps=None, body="arith.addf %a, %o : f32",
           iterators=None, init="0.0"):
    """(body, argument, result type) of a linalg.generic summing ``%x<name>``
    over its first ``reduced`` dimensions into ``out``."""
    rank = len(shape)
    dims = ", ".join(f"d{i}" for i in range(rank))
    kept = ", ".join(["0"] * (len(out) - (rank - reduced)) +
                     [f"d{i}" for i in range(reduced, rank)])
    maps = maps or [f"affine_map<({dims}) -> ({dims})>", f"affine_map<({dims}) -> ({kept})>"]
    iterators = iterators or ['"reduction"'] * reduced + ['"parallel"'] * (rank - reduced)
    text = (f"  %z{name} = arith.constant {init} : f32\n"
            f"  %e{name} = tensor.empty() : {t(out)}\n"
            f"  %f{name} = linalg.fill ins(%z{name} : f32) outs(%e{name} : {t(out)}) -> {t(out)}\n"
            f"  %{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = "
            f"[{', '.join(iterators)}]}} ins(%x{name} : {t(shape)}) outs(%f{name} : {t(out)}) {{\n"
            f"  ^bb0(%a: f32, %o: f32):\n    %s = {body}\n    linalg.yield %s : f32\n"
            f"  }} -> {t(out)}\n")
    return text, f"%x{name}: {t(shape)}", t(out)


def module(*ops) -> str:
    body = "".join(o[0] for o in ops)
    args = ", ".join(o[1] for o in ops)
    results = ", ".join(o[2] for o in ops)
    names = ", ".join("%" + o[1].split(":")[0][2:] for o in ops)
    return f"func.func @main({args}) -> ({results}) {{\n{body}  return {names} : {results}\n}}\n"


BATCH_SEQ = sum_op("bias", [4, 64, 48], 2, [48])           # g.sum((0, 1)): 256 rows
KEEPDIM = sum_op("keep", [512, 40], 1, [1, 40])            # torch-mlir's sum(0) of a matrix
FEW_ROWS = sum_op("few", [128, 64], 1, [64])               # under MIN_ROWS
ROWS = sum_op("rows", [64, 512], 1, [64], iterators=['"parallel"', '"reduction"'],
              maps=["affine_map<(d0, d1) -> (d0, d1)>", "affine_map<(d0, d1) -> (d0)>"])
MAX = sum_op("max", [256, 32], 1, [32], body="arith.maximumf %a, %o : f32")
ONES = sum_op("ones", [256, 32], 1, [32], init="1.0")      # not a zero-filled output


def _rewritten(text):
    m = parse(text)
    with m.context:
        n = cs.column_sums_in_two_stages(m)
        m.operation.verify()
    return n, str(m)


def test_only_plain_sums_over_leading_dimensions_are_rewritten():
    n, text = _rewritten(module(BATCH_SEQ, KEEPDIM, FEW_ROWS, ROWS, MAX, ONES))
    assert n == 2
    assert text.count(cs.CALL_PREFIX) == 2
    assert f"{cs.CALL_PREFIX}4x64x48_over2_to_48" in text
    assert f"{cs.CALL_PREFIX}512x40_over1_to_1x40" in text
    # the first stage sums CHUNK rows at a time
    assert f"tensor<{256 // cs.CHUNK}x{cs.CHUNK}x48xf32>" in text


def test_the_cpu_pipeline_applies_it_and_no_other_target():
    cpu = [e[0] for e in _linalg_edits(PipelineConfig(), "cpu")]
    assert "column_sums" in cpu
    for target in ("vulkan", "cuda", None):
        assert "column_sums" not in [e[0] for e in _linalg_edits(PipelineConfig(), target)]


def test_two_stage_sums_match_torch():
    n, text = _rewritten(module(BATCH_SEQ, KEEPDIM))
    assert n == 2
    flags = ["--iree-hal-target-backends=llvm-cpu", *CPU.flags]
    stream = ic.compile_str(text, extra_args=flags + ["--compile-to=stream"]).decode()
    dispatches = {line.split("::@")[1].split()[0] for line in stream.splitlines()
                  if "stream.cmd.dispatch @" in line}
    # IREE inlined the stages: partial sums of 8 rows, then the 256 / 8 = 32 partials
    assert any("reduction_32x48x8_" in d for d in dispatches), dispatches
    assert any("reduction_48x32_" in d for d in dispatches), dispatches
    vmfb = ic.compile_str(text, extra_args=flags)
    main = rt.load_vm_flatbuffer(vmfb, driver="local-sync").main
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, 48, generator=g) * 3 + 1
    y = torch.randn(512, 40, generator=g)
    got = main(x.numpy(), y.numpy())
    np.testing.assert_allclose(got[0].to_host(), x.double().sum((0, 1)).numpy(),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1].to_host(), y.double().sum(0, keepdim=True).numpy(),
                               rtol=1e-5, atol=1e-4)
