"""A convolution as im2col + data-tiled matmul (what ``passes/conv_matmul.py``
gives IREE) against a gather written straight into the packed layout +
``linalg.mmt4d`` (what a linalg-level rewrite could emit), on the cpu target.

    python benchmarks/conv_mmt4d.py [--batch 64] [--size 26] [--channels 32 64]

Builds both forms of the MNIST CNN's conv2 (3x3, 32 -> 64 channels, channels
last) for the forward (``out = cols @ W^T``) and the weight gradient
(``dW = dY^T @ cols``), compiles them with the cpu target's flags, checks that
each pair agrees on random inputs and times each module with
``iree-benchmark-module`` (2 threads, ``host_memory``'s malloc settings).

Why: in the CNN step the im2col matrix is written once (4.4 ms) and packed
twice by data tiling (7.2 ms), rows for the forward and columns for the weight
gradient. Gathering the input straight into each packed layout skips the
matrix and both packs; IREE 3.13 fuses neither the gather into the packs nor
a convolution into ``mmt4d`` by itself.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from _iree_bench import main_ms  # (beside this file)

from lazy_mlir.targets import host_cpu_flags

FLAGS = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
         "--iree-llvmcpu-enable-ukernels=all"]
# The panel width: the host's f32 vector lanes. The mmt4d ukernel computes wrong
# results for a tile wider than the target's vectors (16 on an AVX2 host).
P = 16 if "avx512f" in host_cpu_flags() else 8
_COPY = "^bb0(%a: f32, %b: f32):\n      linalg.yield %a : f32\n  }"


def _generic(maps: tuple[str, str], src: str, src_t: str, dst_t: str, rank: int,
             dst: str = "%e") -> str:
    """A copy of ``src`` into ``dst`` through the indexing ``maps`` (a gather)."""
    par = ", ".join(['"parallel"'] * rank)
    return (f"linalg.generic {{indexing_maps = [{maps[0]}, {maps[1]}], iterator_types = [{par}]}}"
            f"\n      ins({src} : {src_t}) outs({dst} : {dst_t}) {{\n    {_COPY} -> {dst_t}")


def _im2col(n, oh, c, x_t) -> str:
    """``%cols`` [N*OH*OW, 9*C]: the 3x3 windows of ``%x``, channels last."""
    cols6, m = f"tensor<{n}x{oh}x{oh}x3x3x{c}xf32>", n * oh * oh
    return f"""  %e = tensor.empty() : {cols6}
  %p = {_generic(("affine_map<(n, y, x, i, j, c) -> (n, y + i, x + j, c)>",
                  "affine_map<(n, y, x, i, j, c) -> (n, y, x, i, j, c)>"), "%x", x_t, cols6, 6)}
  %cols = tensor.collapse_shape %p [[0, 1, 2], [3, 4, 5]] : {cols6} into tensor<{m}x{9 * c}xf32>
"""


def _matmul(other: str, other_shape: tuple[int, int], mkn: tuple[int, int, int], out_t: str,
            transposed_lhs: bool) -> str:
    """``%cols`` times ``other`` transposed (``%cols`` on the right when
    ``transposed_lhs``) by a ``linalg.matmul`` that data tiling packs, returned."""
    m, k, n = mkn
    r, c = other_shape
    a, b = ("%t", "%cols") if transposed_lhs else ("%cols", "%t")
    return f"""  %et = tensor.empty() : tensor<{c}x{r}xf32>
  %t = linalg.transpose ins({other} : tensor<{r}x{c}xf32>) outs(%et : tensor<{c}x{r}xf32>) permutation = [1, 0]
  %eo = tensor.empty() : {out_t}
  %o0 = linalg.fill ins(%zero : f32) outs(%eo : {out_t}) -> {out_t}
  %r = linalg.matmul ins({a}, {b} : tensor<{m}x{k}xf32>, tensor<{k}x{n}xf32>) outs(%o0 : {out_t}) -> {out_t}
  return %r : {out_t}
}}
"""


def _mmt4d(lhs: str, rhs: str, tiles: tuple[int, int, int], out_t: str) -> str:
    """``%lhs`` x ``%rhs`` by ``linalg.mmt4d`` ([M1, N1, M0, P] tiles), unpacked
    into ``out_t`` and returned: the end of a packed form."""
    m1, n1, m0 = tiles
    acc = f"tensor<{m1}x{n1}x{m0}x{P}xf32>"
    return f"""  %ea = tensor.empty() : {acc}
  %a0 = linalg.fill ins(%zero : f32) outs(%ea : {acc}) -> {acc}
  %a = linalg.mmt4d ins(%lhs, %rhs : {lhs}, {rhs}) outs(%a0 : {acc}) -> {acc}
  %eo = tensor.empty() : {out_t}
  %r = linalg.unpack %a inner_dims_pos = [0, 1] inner_tiles = [{m0}, {P}] into %eo : {acc} -> {out_t}
  return %r : {out_t}
}}
"""


def _as_4d(name: str, dims: tuple[int, int, int]) -> str:
    """``%{name}3`` [A, B, T] as ``%{name}`` [A, B, T, 1]: an mmt4d operand (K0 = 1)."""
    a, b, t = dims
    return (f"  %{name} = tensor.expand_shape %{name}3 [[0], [1], [2, 3]] output_shape "
            f"[{a}, {b}, {t}, 1] : tensor<{a}x{b}x{t}xf32> into tensor<{a}x{b}x{t}x1xf32>\n")


def _gathered(name: str, in_map: str, x_t: str, shape7: tuple, dims: tuple[int, int, int]) -> str:
    """``%x`` gathered through ``in_map`` into ``shape7`` and seen as the mmt4d
    operand ``%{name}`` [A, B, T, 1] (``dims`` = A, B, T)."""
    t7 = "tensor<" + "x".join(map(str, shape7)) + "xf32>"
    out_map = "affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3, d4, d5, d6)>"
    a, b, t = dims
    return (f"  %{name}_e = tensor.empty() : {t7}\n"
            f"  %{name}7 = {_generic((in_map, out_map), '%x', x_t, t7, 7, f'%{name}_e')}\n"
            f"  %{name}3 = tensor.collapse_shape %{name}7 [[0, 1, 2], [3, 4, 5], [6]] : {t7} into "
            f"tensor<{a}x{b}x{t}xf32>\n" + _as_4d(name, dims))


def _panels(name: str, src: str, src_t: str, in_map: str, dims: tuple[int, int]) -> str:
    """The 2-d ``src`` in P-wide panels through ``in_map`` ((t, k, r) -> its
    element): the mmt4d operand ``%{name}`` [A, B, P, 1] (``dims`` = A, B)."""
    a, b = dims
    p3 = f"tensor<{a}x{b}x{P}xf32>"
    maps = (in_map, "affine_map<(t, k, r) -> (t, k, r)>")
    return (f"  %{name}_e = tensor.empty() : {p3}\n"
            f"  %{name}3 = {_generic(maps, src, src_t, p3, 3, f'%{name}_e')}\n"
            + _as_4d(name, (a, b, P)))


def forward(n, h, c, o, m0=8):
    """(im2col + matmul, packed gather + mmt4d) for ``out[N*OH*OW, O]``;
    M tiles of ``m0`` output columns (OW must be a multiple)."""
    oh = h - 2
    kc, m = 9 * c, n * oh * oh
    x_t, w_t, out_t = f"tensor<{n}x{h}x{h}x{c}xf32>", f"tensor<{o}x{kc}xf32>", f"tensor<{m}x{o}xf32>"
    head = f"func.func @main(%x: {x_t}, %w: {w_t}) -> {out_t} {{\n  %zero = arith.constant 0.0 : f32\n"
    ref = head + _im2col(n, oh, c, x_t) + _matmul("%w", (o, kc), (m, kc, o), out_t,
                                                 transposed_lhs=False)
    lhs, rhs = f"tensor<{m // m0}x{kc}x{m0}x1xf32>", f"tensor<{o // P}x{kc}x{P}x1xf32>"
    packed = (head
              + _gathered("lhs", f"affine_map<(n, y, t, i, j, c, r) -> (n, y + i, t * {m0} + r + j, c)>",
                          x_t, (n, oh, oh // m0, 3, 3, c, m0), (m // m0, kc, m0))
              + _panels("rhs", "%w", w_t, f"affine_map<(t, k, r) -> (t * {P} + r, k)>", (o // P, kc))
              + _mmt4d(lhs, rhs, (m // m0, o // P, m0), out_t))
    return ref, packed, [(n, h, h, c), (o, kc)]


def weight_grad(n, h, c, o):
    """(im2col + matmul, packed gather + mmt4d) for ``dW[O, KH*KW*C]``
    (C a multiple of P: each P-column panel of cols is P contiguous channels)."""
    oh = h - 2
    kc, m = 9 * c, n * oh * oh
    x_t, dy_t, out_t = f"tensor<{n}x{h}x{h}x{c}xf32>", f"tensor<{m}x{o}xf32>", f"tensor<{o}x{kc}xf32>"
    head = f"func.func @main(%x: {x_t}, %dy: {dy_t}) -> {out_t} {{\n  %zero = arith.constant 0.0 : f32\n"
    ref = head + _im2col(n, oh, c, x_t) + _matmul("%dy", (m, o), (o, m, kc), out_t,
                                                 transposed_lhs=True)
    lhs, rhs = f"tensor<{o // P}x{m}x{P}x1xf32>", f"tensor<{kc // P}x{m}x{P}x1xf32>"
    packed = (head
              + _gathered("rhs", f"affine_map<(i, j, b, n, y, x, r) -> (n, y + i, x + j, b * {P} + r)>",
                          x_t, (3, 3, c // P, n, oh, oh, P), (kc // P, m, P))
              + _panels("lhs", "%dy", dy_t, f"affine_map<(t, k, r) -> (k, t * {P} + r)>", (o // P, m))
              + _mmt4d(lhs, rhs, (o // P, kc // P, P), out_t))
    return ref, packed, [(n, h, h, c), (m, o)]


def _run(vmfb: Path, inputs: list[Path], out: Path) -> np.ndarray:
    subprocess.run(["iree-run-module", f"--module={vmfb}", "--device=local-task",
                    "--function=main", *[f"--input=@{p}" for p in inputs], f"--output=@{out}"],
                   capture_output=True, check=True)
    return np.load(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=26, help="input height and width")
    p.add_argument("--channels", type=int, nargs=2, default=(32, 64), metavar=("IN", "OUT"))
    p.add_argument("--min-time", type=float, default=2.0, help="seconds per module")
    a = p.parse_args(argv)
    c, o = a.channels
    if c % P or o % P or (a.size - 2) % 8:
        raise SystemExit(f"channels must be multiples of {P} and size - 2 a multiple of 8")
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="conv_mmt4d_"))
    for name, build in (("forward", forward), ("weight grad", weight_grad)):
        ref, packed, shapes = build(a.batch, a.size, c, o)
        inputs = []
        for i, shape in enumerate(shapes):
            inputs.append(work / f"{name[0]}{i}.npy")
            np.save(inputs[-1], rng.standard_normal(shape).astype(np.float32))
        times, outs = {}, {}
        for form, text, extra in (("im2col + data-tiled matmul", ref, ["--iree-opt-data-tiling"]),
                                  ("packed gather + mmt4d", packed, [])):
            src, vmfb = work / f"{name[0]}_{len(times)}.mlir", work / f"{name[0]}_{len(times)}.vmfb"
            src.write_text(text)
            subprocess.run(["iree-compile", str(src), "-o", str(vmfb), *FLAGS, *extra], check=True)
            outs[form] = _run(vmfb, inputs, work / f"{name[0]}_{len(times)}_out.npy")
            times[form] = main_ms(vmfb, [f"@{p}" for p in inputs], a.min_time)
        (f1, t1), (f2, t2) = times.items()
        a1, a2 = outs.values()
        err = float(np.abs(a1 - a2).max() / max(np.abs(a1).max(), 1e-30))
        print(f"{name}: {f1} {t1:.2f} ms, {f2} {t2:.2f} ms ({t2 / t1:.2f}x); "
              f"max relative difference {err:.1e}")
        if err > 1e-5:
            print(f"  the two forms disagree: see {work}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
