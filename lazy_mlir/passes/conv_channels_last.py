"""Channels-first convolutions as IREE's channels-last direct convolution (a
linalg-stage pass, cpu only).

torch-mlir lowers ``aten.convolution`` to ``linalg.conv_2d_nchw_fchw``. IREE's
CPU code for that layout is slow: the MNIST CNN's conv2 (batch 64, 32 -> 64
channels, 3x3) took 335 ms, where ``linalg.conv_2d_nhwc_hwcf`` with its filter
already HWCF took 7 ms (one vector of output channels per step, about the
machine's 200 GFLOP/s). Each convolution with ``MIN_CHANNELS`` in and out
(float32, static shapes, windows up to ``MAX_WINDOW``, any number of output
positions: small ones too, as in ``conv_matmul``) becomes a call of a
private function that transposes the input, the filter and the accumulator
to channels last, convolves and transposes the result back; IREE inlines it
and cancels the activation transposes against their neighbours
(``conv_matmul`` keeps activations channels last).

The filter transpose sits behind IREE's ``compute_barrier.start``
(``linalg_edit.FUSION_BARRIER``, written in generic form: torch-mlir only
passes it through; IREE erases it once dispatches are formed): without it
IREE fuses the transpose into the convolution's dispatch, which then reads
the filter as (f, c, kh, kw) and runs at the 335 ms of the channels-first op
(IREE 3.13 generalizes every convolution, and elementwise fusion composes the
transpose into it; neither ``--iree-global-opt-propagate-transposes=false``
nor a second use of the filter stops it). With the barrier the transpose is
its own dispatch of a few microseconds.

Depthwise convolutions (``linalg.depthwise_conv_2d_nchw_chw``, one filter
per channel) become ``linalg.depthwise_conv_2d_nhwc_hwc`` the same way: 0.18
against 2.9 ms for a MobileNet-like layer (batch 32, 32 channels, 28x28, 3x3),
IREE vectorizing along the channels.

A padded convolution's input reaches the pass as a ``tensor.pad`` (channels
first) of the previous layer's output; the function takes the unpadded
tensor and pads it after its transpose. Transposing the padded tensor
instead, IREE fused that transpose into the convolution's dispatch, as it
does the filter's: a 3x3 convolution with padding 1 (batch 32, 32 -> 32
channels, 28x28) took 38.5 ms, a channel-strided read at 12 GFLOP/s.

IREE vectorizes the output columns by the largest divisor of the output width
up to 8 (``MAX_COLUMN_TILE``); a width like 26 gets tiles of 2 and runs at
half speed, so such a convolution computes a few more zero-padded columns
and drops them (``_columns``).

On a host with AVX2 but not AVX-512, IREE 3.13 tiles the convolution by 4
columns and 4 output channels, half a vector: the pass sets the tile itself
(``_avx2_tile``, a ``compilation_info`` on the op).

Which convolutions reach this pass: ``conv_matmul`` (``direct=True`` on cpu)
leaves it the stride-1 forwards with ``DIRECT_CHANNELS`` channels and writes
stride-1 input gradients, and depthwise ones, as stride-1 convolutions;
weight gradients go through its matmuls. The rest, and those too small for
either pass, stay as they are.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E
from . import conv_matmul

MIN_CHANNELS = conv_matmul.DIRECT_CHANNELS  # what conv_matmul leaves here
MAX_WINDOW = 7
"""Largest kernel height or width rewritten: torch-mlir writes some
gradients as convolutions whose "kernel" is a whole feature map, and those
stay in the form they have."""


MAX_COLUMN_TILE = 8
"""IREE's CPU convolution (3.13) takes as its vector of output columns the
largest divisor of the output width up to this: 8 for a width of 24, but 2
for 26 and 1 for 29. The CNN's conv2 input gradient (64 -> 32 channels, 26
columns) took 15.5 ms with tiles of 2 and 10.2 ms for 28 columns with tiles
of 7, 15% more work (``iree-benchmark-module``, the single op)."""

MIN_COLUMN_TILE = 4
"""A convolution whose output width has no divisor from this up to
``MAX_COLUMN_TILE`` computes a few more columns (``_columns``) and drops
them."""


_FUNCTION = "lazy_mlir_conv_nhwc_"
CALL_PREFIX = "call @" + _FUNCTION
"""How a rewritten convolution reads in the printed module."""


def _dims(dims) -> str:
    return "x".join(map(str, dims))


def _tensor(*dims: int) -> str:
    return f"tensor<{_dims(dims)}xf32>"


AVX2_COLUMN_TILE = 6
"""Output columns per vector step on an AVX2 host (``_avx2_tile``): with two
8-wide vectors of output channels that is 12 of the 16 vector registers for
accumulators. The CNN's conv2 forward (batch 64, 32 -> 64 channels, 24
columns) took 32.8 ms with IREE's tile of 4 columns x 4 channels and 11.6-12.6
ms with 6 x 16; its input gradient (64 -> 32 channels, 28 columns) 43.9 ms
and 13.9 ms with 4 x 16 (``iree-benchmark-module``, the single op, 2 threads;
3 x 32, 8 x 16 and 12 x 8 were slower)."""

AVX2_CHANNEL_TILE = 16
"""Output channels per vector step on an AVX2 host: two 8-wide vectors; four
(32) where the column tile is 2 or less."""

AVX2_MIN_COLUMN_TILE = 2
"""On an AVX2 host a width is widened only below this column tile: the CNN's
26-column input gradient ran at 2 columns x 32 channels in its own width
(single op 14.9 ms, against 13.9 widened to 28 at 4 x 16), and its step module
in 53-68 ms against 63-77 widened (6 alternating pairs): the pad and slice
around a widened convolution cost more than the narrower tile."""

AVX2_LANES = 8
"""f32 lanes of an AVX2 vector. Output channels that are not a multiple of 16
(LeNet-5's conv2 input gradient: 16 -> 6 channels, 14 columns, batch 64)
took IREE's AVX2 tile of 4 columns x 4 channels, which divides neither: 17.7
ms for the single op (32.6 at 16 columns), against 1.6-1.8 ms with 7 columns
x 6 channels; LeNet's step module went from 20.6 to 7.9 ms. So an AVX2 host
tiles them too: one vector of channels (or all of them, below 8), up to 12
columns."""

MIN_WORKGROUPS = 8
"""Workgroups ``_avx2_tile`` asks for at least (images x row blocks), so that
both threads stay busy at small batches."""


def _avx2_host() -> bool:
    from ..targets import host_cpu_flags
    flags = host_cpu_flags()
    return "avx2" in flags and "avx512f" not in flags


def _max_column_tile() -> int:
    return AVX2_COLUMN_TILE if _avx2_host() else MAX_COLUMN_TILE


def _min_column_tile() -> int:
    return AVX2_MIN_COLUMN_TILE if _avx2_host() else MIN_COLUMN_TILE


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, at_most) + 1) if n % d == 0)


def _column_tile(width: int) -> int:
    return _largest_divisor(width, _max_column_tile())


def _avx2_tile(n: int, oh: int, cols: int, c: int, f: int) -> str:
    """``compilation_info = ...,`` for a channels-last convolution on an AVX2
    host (up to ``AVX2_COLUMN_TILE`` columns x ``AVX2_CHANNEL_TILE`` output
    channels, a reduction step of up to 8 input channels, as IREE's own), or
    "" where the tiles would not divide the shape or the host has AVX-512
    (there IREE's tile of a whole vector of channels was measured fast).
    Output channels that are not a multiple of 16 but fit one vector, or are
    a multiple of 8, take one vector of channels (or all of them) and up to
    twice as many columns (``AVX2_LANES``)."""
    if not _avx2_host():
        return ""
    if f % AVX2_CHANNEL_TILE == 0:
        cols_tile = _column_tile(cols)
        channels = AVX2_CHANNEL_TILE * (
            2 if cols_tile <= 2 and f % (2 * AVX2_CHANNEL_TILE) == 0 else 1)
    elif f <= AVX2_LANES or f % AVX2_LANES == 0:
        cols_tile = _largest_divisor(cols, 2 * AVX2_COLUMN_TILE)
        channels = min(f, AVX2_LANES)
    else:
        return ""
    rows = max((d for d in range(1, oh + 1) if oh % d == 0 and n * (oh // d) >= MIN_WORKGROUPS),
               default=1)
    config = (f"distribution = [1, {rows}, {cols}, {f}, 0, 0, 0], "
              f"vector_common_parallel = [1, 1, {cols_tile}, {channels}, 0, 0, 0], "
              f"vector_reduction = [0, 0, 0, 0, 1, 1, {_largest_divisor(c, 8)}]")
    return ("compilation_info = #iree_codegen.compilation_info<lowering_config = "
            f"#iree_cpu.lowering_config<{config}>, translation_info = "
            "#iree_codegen.translation_info<pipeline = "
            "#iree_cpu.pipeline<ConvTileAndDecomposeExpert>>>, ")


def _columns(width: int) -> int:
    """The output width to compute for ``width`` columns: the first from it
    whose column tile (see ``MAX_COLUMN_TILE``) is ``MIN_COLUMN_TILE`` or
    more (``AVX2_MIN_COLUMN_TILE`` on an AVX2 host); narrow maps stay as
    they are."""
    if width < 2 * MIN_COLUMN_TILE:
        return width
    wide = width
    while _column_tile(wide) < _min_column_tile():
        wide += 1
    return wide


def _pad_nhwc(dst: str, src: str, shape: list[int], low: list[int], high: list[int]) -> list[str]:
    """``dst = src`` (NHWC, of ``shape``) padded with zeros by (top, left)
    ``low`` and (bottom, right) ``high``."""
    n, h, w, c = shape
    out = [n, h + low[0] + high[0], w + low[1] + high[1], c]
    return [f"  {dst} = tensor.pad {src} low[0, {low[0]}, {low[1]}, 0] "
            f"high[0, {high[0]}, {high[1]}, 0] {{",
            "  ^bb0(%i0: index, %i1: index, %i2: index, %i3: index):",
            "    tensor.yield %zero : f32",
            f"  }} : {_tensor(*shape)} to {_tensor(*out)}"]


def _function(name: str, x: list[int], w: list[int], out: list[int], strides: list[int],
              dilations: list[int], pad: tuple[list[int], list[int]] = ([0, 0], [0, 0])) -> str:
    """``@name(x NCHW, w FCHW, init NFHW) -> NFHW`` through the channels-last op
    (a depthwise one for ``w`` CHW):
    ``x`` padded in space by ``pad`` ((top, left), (bottom, right)) after its
    transpose, on ``_columns(OW)`` output columns (the extra ones dropped)."""
    n, c, h, wd = x
    depthwise = len(w) == 3  # [C, KH, KW]: linalg.depthwise_conv_2d_nchw_chw
    f, kh, kw = (c, *w[1:]) if depthwise else (w[0], *w[2:])
    _, _, oh, ow = out
    cols = ow if depthwise else _columns(ow)  # (depthwise column tiles not measured)
    (top, left), (bottom, right) = pad
    # the rows and columns the output reads (torch's output-size formula): padding
    # past them is dropped (a stride's leftover row made linalg infer a 4-row
    # window from a 1-row output: "inferred ... to be 4, but found 3"), and
    # columns are padded up to the tiled output's
    bottom = max(0, (oh - 1) * strides[0] + dilations[0] * (kh - 1) + 1 - h - top)
    right = max(0, (cols - 1) * strides[1] + dilations[1] * (kw - 1) + 1 - wd - left)
    wide_in = wd + left + right
    t_x, t_w, t_o = _tensor(*x), _tensor(*w), _tensor(*out)
    t_xl, t_ol = _tensor(n, h, wd, c), _tensor(n, oh, ow, f)
    t_wl = _tensor(kh, kw, c) if depthwise else _tensor(kh, kw, c, f)
    t_xp, t_oc = _tensor(n, h + top + bottom, wide_in, c), _tensor(n, oh, cols, f)
    tile = "" if depthwise else _avx2_tile(n, oh, cols, c, f)
    attrs = (f"{{{tile}dilations = dense<{dilations}> : vector<2xi64>, "
             f"strides = dense<{strides}> : vector<2xi64>}}")
    lines = [
        f"func.func private @{name}(%x: {t_x}, %w: {t_w}, %init: {t_o}) -> {t_o} {{",
        "  %zero = arith.constant 0.0 : f32",
        f"  %ex = tensor.empty() : {t_xl}",
        f"  %xl = linalg.transpose ins(%x : {t_x}) outs(%ex : {t_xl}) permutation = [0, 2, 3, 1]",
        f"  %ew = tensor.empty() : {t_wl}",
        f"  %wl = linalg.transpose ins(%w : {t_w}) outs(%ew : {t_wl}) permutation = "
        + ("[1, 2, 0]" if depthwise else "[2, 3, 1, 0]"),
        f'  %wb = "{E.FUSION_BARRIER}"(%wl) : ({t_wl}) -> {t_wl}',
        f"  %eo = tensor.empty() : {t_ol}",
        f"  %ol = linalg.transpose ins(%init : {t_o}) outs(%eo : {t_ol}) permutation = [0, 2, 3, 1]",
    ]
    x_in = "%xl"
    if top or left or bottom or right:
        lines += _pad_nhwc("%xp", "%xl", [n, h, wd, c], [top, left], [bottom, right])
        x_in = "%xp"
    o_in = "%ol"
    if cols != ow:
        lines += _pad_nhwc("%ow", "%ol", [n, oh, ow, f], [0, 0], [0, cols - ow])
        o_in = "%ow"
    op = "linalg.depthwise_conv_2d_nhwc_hwc" if depthwise else "linalg.conv_2d_nhwc_hwcf"
    lines.append(f"  %cw = {op} {attrs} ins({x_in}, %wb : {t_xp}, {t_wl}) "
                 f"outs({o_in} : {t_oc}) -> {t_oc}")
    if cols != ow:
        lines.append(f"  %c = tensor.extract_slice %cw[0, 0, 0, 0] [{n}, {oh}, {ow}, {f}] "
                     f"[1, 1, 1, 1] : {t_oc} to {t_ol}")
    result = "%c" if cols != ow else "%cw"
    lines += [f"  %er = tensor.empty() : {t_o}",
              f"  %r = linalg.transpose ins({result} : {t_ol}) outs(%er : {t_o}) "
              "permutation = [0, 3, 1, 2]",
              f"  return %r : {t_o}", "}", ""]
    return "\n".join(lines)


def _spatial_pad(x) -> tuple | None:
    """(source, ((top, left), (bottom, right))) when the convolution's input
    ``x`` is a zero ``tensor.pad`` of a static tensor in H and W only (the
    padding of ``aten.convolution``); None otherwise."""
    found = E.zero_pad(x)
    if found is None:
        return None
    source, low, high = found
    if low[:2] != [0, 0] or high[:2] != [0, 0] or E.shape(source) is None:
        return None
    return source, (low[2:], high[2:])


def _rewritable(op) -> tuple | None:
    """(x, w, out shapes, strides, dilations) of a convolution this pass takes."""
    if len(op.operands) != 3:
        return None
    x, w, out = (E.shape(v) for v in op.operands)
    if x is None or w is None or out is None:
        return None
    if any(E.element_type(v) != "f32" for v in op.operands):
        return None
    strides, dilations = E.int_list(op, "strides"), E.int_list(op, "dilations")
    if strides is None or dilations is None:
        return None
    if (x[1] < MIN_CHANNELS or w[0] < MIN_CHANNELS
            or w[-2] > MAX_WINDOW or w[-1] > MAX_WINDOW):
        return None
    return x, w, out, strides, dilations


def to_channels_last(module) -> int:
    """Rewrite the module's ``linalg.conv_2d_nchw_fchw`` and
    ``linalg.depthwise_conv_2d_nchw_chw`` ops that ``_rewritable`` takes, in
    place; returns how many."""
    made: set[str] = set()
    count = 0
    for op in (E.ops_named(module, "linalg.conv_2d_nchw_fchw")
               + E.ops_named(module, "linalg.depthwise_conv_2d_nchw_chw")):
        how = _rewritable(op)
        if how is None:
            continue
        x, w, out, strides, dilations = how
        operands = list(op.operands)
        pad, suffix = ([0, 0], [0, 0]), ""
        padded = _spatial_pad(operands[0])
        if padded is not None:  # padded after the transpose: see the module's docstring
            operands[0], pad = padded
            x, suffix = E.shape(operands[0]), f"_p{_dims(pad[0] + pad[1])}"
        name = f"{_FUNCTION}{_dims(x)}_{_dims(w)}_s{_dims(strides)}_d{_dims(dilations)}{suffix}"
        if name not in made:
            E.add_functions(module, _function(name, x, w, out, strides, dilations, pad))
            made.add(name)
        E.call_instead(op, name, operands)
        count += 1
    return count
