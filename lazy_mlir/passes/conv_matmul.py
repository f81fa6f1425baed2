"""Convolutions and their gradients as im2col + one plain matmul (an fx pass).

IREE's CPU backend runs ``linalg.matmul`` through data tiling and its
microkernels (~200 GFLOP/s on this class of machine) but convolutions, and
above all the weight gradient of a 3x3 convolution, through generic loops
that reach a few GFLOP/s. Its own ``--iree-global-opt-use-im2col-for-convs``
leaves a 4-d ``matmul_like`` contraction that misses the microkernels (and is
wrong on Vulkan from batch 4 on). Here each 2-d convolution becomes a
channels-last im2col (a copy), one 2-d ``aten.mm`` and permutes, with
L = OH*OW and C*K = C*KH*KW (the weight's own order: ``W[O, C*K]`` is the
weight as it lies, and so is the weight gradient):

- forward: ``out[N*L, O] = cols[N*L, C*K] @ W[O, C*K]^T``
- weight gradient: ``dW[O, C*K] = dY[N*L, O]^T @ cols[N*L, C*K]``, summed over
  batch slices when ``cols`` is large (``WGRAD_CHUNK_BYTES``, timed on cpu),
  or on cpu a batch matmul over slices, summed, when ``dW`` is too small to
  keep the cores busy (``SPLIT_K_MAX_CHANNELS``)
- input gradient (stride 1): ``Z = dY' @ W[O, C*K]`` on the padded input grid,
  then a sum of KH*KW row-shifted blocks of ``Z`` (``_input_grad``); other
  strides keep torch-mlir's lowering unless ``direct``. With ``direct`` (cpu),
  every input gradient but the wide stride-1 ones is ``Z = dY @ W[O, C*K]``
  and a col2im (``_input_grad_col2im``).

All matrices have rows of positions (rows of O or C*K floats): the channels-first
forms had rows N*L floats apart, a multiple of 4 KiB for the CNN (36864), and
IREE's packs and transposes over them ran at ~1 GB/s (4K aliasing).

Only ungrouped, non-transposed 2-d float convolutions are rewritten; the rest
stay ``aten.convolution`` / ``aten.convolution_backward`` (torch-mlir lowers
them). Small ones are rewritten too: torch-mlir's weight gradient is a
convolution over the batch that IREE ran at 1-5 GFLOP/s whatever its size.
A former floor of 1024 output positions (N*OH*OW) left the tiny ResNet's 3x3
layers (64-256 positions at batch 4) to it, 4.7 of its step module's 6.7 ms,
and LeNet-5 at batch 1: its step module took 0.25 ms rewritten against 0.77
(one thread, process time, 4 alternating ``iree-benchmark-module`` runs each,
2026-11-25). With ``direct`` (``decompositions(direct=True)``, the cpu target), the
forward of a stride-1 convolution with at least ``DIRECT_CHANNELS`` input and
output channels stays ``aten.convolution``, and its input gradient becomes
one (``_input_grad_direct``): ``passes/conv_channels_last`` gives them to
IREE as channels-last direct convolutions, faster than the matmuls. Strided and
narrow input gradients are col2im matmuls (``_input_grad_col2im``). The
weight gradient is always the im2col matmul. A depthwise convolution's gradients are decomposed on every
target (``_depthwise_backward``). Applied as a decomposition
table while ``pipeline.fx_graph.decompose`` re-traces, so every new node has
its fake value.
"""
from __future__ import annotations

import functools

import torch

from ..ops.registry import TARGET, register_decomposition

aten = torch.ops.aten


MIN_DEPTH = 9
"""Smallest contraction depth (C*KH*KW; O*KH*KW for the input gradient) worth
a matmul: a 3x3 window of one channel. The CNN's first layer (1 -> 32
channels) ran as IREE's direct convolution at ~3 GFLOP/s (9.5 ms of one core
for 25 MFLOP); as im2col + matmul its output also stays channels last for the
next layer. Shallower windows stay convolutions."""


def _rewritable(x: torch.Tensor, weight: torch.Tensor, transposed: bool, groups: int) -> bool:
    return (x.dim() == 4 and weight.dim() == 4 and not transposed and groups == 1
            and x.dtype.is_floating_point and weight.dtype == x.dtype)


def _deep(channels: int, weight: torch.Tensor) -> bool:
    return channels * weight.shape[2] * weight.shape[3] >= MIN_DEPTH


def _cols(x, kh, kw, stride, padding, dilation):
    """im2col of ``x`` [N, C, H, W] as a row-major [N*OH*OW, C*KH*KW] matrix
    (row n*OH*OW + oh*OW + ow, column (c*KH + i)*KW + j): one row per output
    position, its columns in the weight's own order, so that the weight
    [O, C, KH, KW] and its gradient are [O, C*KH*KW] matrices as they lie.

    Why this column order: a (kh, kw, c) order made every weight and weight
    gradient a transposing copy each step (the medium ResNet: 4.9 M weights,
    transposed twice, strided reads fused into the AdamW update).
    Why rows of positions: IREE's data tiling packs a matmul operand [R, K]
    into 16-row panels. A [C*K, N*L] matrix (the channels-first im2col) has
    rows N*L floats apart, 147456 bytes for the CNN (36 pages): every 16-row
    panel maps to one L1 set and the packs and the transposes around them ran
    at ~1 GB/s. Rows of C*K floats (1152 bytes) do not alias.
    The windows are ``aten.unfold`` of the (padded) input: one gather-like
    ``linalg.generic``. Strided slices of the padded input, stacked, became
    one copy dispatch per tap (25 for LeNet's 5x5 conv1, ~0.2 ms each); the
    gather ran the LeNet batch-64 step 15% faster (iree-benchmark-module on
    the dumped step, paired runs with farm-bench)."""
    n, c = x.shape[0], x.shape[1]
    cols = _windows(x, kh, kw, stride, padding, dilation, channels_last=False)
    oh, ow = cols.shape[1], cols.shape[2]                    # [N, OH, OW, C, KH, KW]
    return aten.reshape(cols, [n * oh * ow, c * kh * kw]), oh, ow


def _windows(x, kh, kw, stride, padding, dilation, channels_last=True):
    """The windows of ``x`` [N, C, H, W] as a view [N, OH, OW, KH, KW, C]
    (``channels_last``) or [N, OH, OW, C, KH, KW] (unfolded channels first:
    a window row is then KW neighbouring floats of the input)."""
    if not channels_last:
        if padding[0] or padding[1]:
            x = aten.constant_pad_nd(x, [padding[1], padding[1], padding[0], padding[0]], 0.0)
        win = aten.unfold(x, 2, (kh - 1) * dilation[0] + 1, stride[0])    # [N, C, OH, W, sh]
        win = aten.unfold(win, 3, (kw - 1) * dilation[1] + 1, stride[1])  # [N, C, OH, OW, sh, sw]
        if dilation[0] != 1 or dilation[1] != 1:
            win = aten.slice(aten.slice(win, 4, 0, None, dilation[0]), 5, 0, None, dilation[1])
        return aten.permute(win, [0, 2, 3, 1, 4, 5])          # [N, OH, OW, C, KH, KW]
    xt = aten.permute(x, [0, 2, 3, 1])                       # [N, H, W, C]
    if padding[0] or padding[1]:
        xt = aten.constant_pad_nd(xt, [0, 0, padding[1], padding[1], padding[0], padding[0]], 0.0)
    win = aten.unfold(xt, 1, (kh - 1) * dilation[0] + 1, stride[0])   # [N, OH, W, C, span]
    win = aten.unfold(win, 2, (kw - 1) * dilation[1] + 1, stride[1])  # [N, OH, OW, C, sh, sw]
    if dilation[0] != 1 or dilation[1] != 1:
        win = aten.slice(aten.slice(win, 4, 0, None, dilation[0]), 5, 0, None, dilation[1])
    return aten.permute(win, [0, 1, 2, 4, 5, 3])             # [N, OH, OW, KH, KW, C]


def _weight_matrix(weight):
    """``weight`` [O, C, KH, KW] as [O, C*KH*KW], the column order of ``_cols``
    (a view)."""
    return aten.reshape(weight, [weight.shape[0], -1])


def _rows(t):
    """[N, O, OH, OW] as the channels-last matrix [N*OH*OW, O]."""
    n, o, oh, ow = t.shape
    return aten.reshape(aten.permute(t, [0, 2, 3, 1]), [n * oh * ow, o])


def _forward(x, weight, stride, padding, dilation):
    """conv2d(x, weight) without bias, as [N, O, OH, OW] (a permuted view).
    ``out[N*L, O] = cols[N*L, C*K] @ W[O, C*K]^T``."""
    o = weight.shape[0]
    cols, oh, ow = _cols(x, weight.shape[2], weight.shape[3], stride, padding, dilation)
    out = aten.mm(cols, aten.t(_weight_matrix(weight)))     # [N*OH*OW, O]
    return aten.permute(aten.reshape(out, [x.shape[0], oh, ow, o]), [0, 3, 1, 2])


def _input_grad(grad_out, weight, h, w, padding, dilation):
    """The input gradient of a stride-1 convolution, [N, C, H, W], from one
    matmul ``Z = dY' @ W[O, C*K]`` and a sum of KH*KW row-shifted column blocks
    of ``Z`` (col2im without scatter, pads or im2col of the padded dY).

    ``dY'`` is dY placed on the padded input grid [N, Hp, Wp] (zero past
    OH, OW), flattened to rows q = (n*Hp + y)*Wp + x, with ``s_max`` zero rows
    in front. Window element (i, j) reaches input row q from dY' row
    q - s_ij, s_ij = i*dh*Wp + j*dw: where y - i*dh or x - j*dw is negative
    that row wraps into the zero border (stride 1: Hp - OH = (KH-1)*dh), or into
    the leading zero rows, so no masks are needed. The cost: (Hp*Wp)/(OH*OW)
    more matmul rows (1.17x for the CNN's 24x24 -> 26x26)."""
    n, o, oh, ow = grad_out.shape
    _, c, kh, kw = weight.shape
    hp, wp = h + 2 * padding[0], w + 2 * padding[1]
    dy = aten.permute(grad_out, [0, 2, 3, 1])                          # [N, OH, OW, O]
    dy = aten.constant_pad_nd(dy, [0, 0, 0, wp - ow, 0, hp - oh], 0.0)  # [N, Hp, Wp, O]
    g = n * hp * wp
    s_max = (kh - 1) * dilation[0] * wp + (kw - 1) * dilation[1]
    rows = aten.constant_pad_nd(aten.reshape(dy, [g, o]), [0, 0, s_max, 0], 0.0)
    z = aten.mm(rows, _weight_matrix(weight))                          # [s_max + G, C*K]
    z = aten.reshape(z, [s_max + g, c, kh * kw])
    total = None
    for i in range(kh):
        for j in range(kw):
            start = s_max - (i * dilation[0] * wp + j * dilation[1])
            block = aten.select(aten.slice(z, 0, start, start + g), 2, i * kw + j)
            total = block if total is None else aten.add(total, block)
    dx = aten.reshape(total, [n, hp, wp, c])
    dx = aten.slice(aten.slice(dx, 1, padding[0], padding[0] + h), 2, padding[1], padding[1] + w)
    return aten.permute(dx, [0, 3, 1, 2])


def _input_grad_col2im(grad_out, weight, h, w, stride, padding, dilation):
    """The input gradient [N, C, H, W] of a convolution of any stride as one
    matmul ``Z = dY[N*OH*OW, O] @ W[O, C*K]`` (the weight as it lies) and a
    col2im: window element (i, j) of output position (oh, ow) adds
    ``Z[.., c, i, j]`` to padded input row ``oh*sh + i*dh`` (columns alike).

    The matmul has the convolution's own multiply-adds: none on the zeros of
    a stride-spread dY (``_input_grad_direct``: 3/4 of them at stride 2), nor
    on the padded grid's border rows (``_input_grad``: 4.3x the rows for the
    medium ResNet's 2x2 maps), and no flipped, transposed copy of the weight.
    The col2im is gathers, not a scatter: padded input row ``a*sh + r`` takes
    the taps i with ``i*dh % sh == r`` from ``Z`` row ``a - i*dh // sh`` (a
    slice of ``Z`` padded once), one sum per residue class (r, t), the
    classes interleaved by a stack and a reshape."""
    n, o, oh, ow = grad_out.shape
    _, c, kh, kw = weight.shape
    (sh, sw), (dh, dw) = stride, dilation
    z = aten.reshape(aten.mm(_rows(grad_out), _weight_matrix(weight)), [n, oh, ow, c, kh, kw])
    rows, cols = -(-(h + 2 * padding[0]) // sh), -(-(w + 2 * padding[1]) // sw)  # per class
    qh, qw = [i * dh // sh for i in range(kh)], [j * dw // sw for j in range(kw)]
    z = aten.constant_pad_nd(z, [0, 0, 0, 0, 0, 0, max(qw), cols - ow, max(qh), rows - oh], 0.0)
    classes = []
    for r in range(sh):
        row = []
        for t in range(sw):
            total = None
            for i in (i for i in range(kh) if i * dh % sh == r):
                for j in (j for j in range(kw) if j * dw % sw == t):
                    top, left = max(qh) - qh[i], max(qw) - qw[j]
                    tap = aten.slice(aten.slice(z, 1, top, top + rows), 2, left, left + cols)
                    tap = aten.select(aten.select(tap, 5, j), 4, i)         # [N, A, B, C]
                    total = tap if total is None else aten.add(total, tap)
            if total is None:  # no tap lands on this class (stride above the window)
                total = aten.new_zeros(z, [n, rows, cols, c])
            row.append(total)
        classes.append(row[0] if sw == 1 else aten.stack(row, 3))            # [N, A, B(, sw), C]
    dx = classes[0] if sh == 1 else aten.stack(classes, 2)                  # [N, A(, sh), B.., C]
    dx = aten.reshape(dx, [n, rows * sh, cols * sw, c])
    dx = aten.slice(aten.slice(dx, 1, padding[0], padding[0] + h), 2, padding[1], padding[1] + w)
    return aten.clone(aten.permute(dx, [0, 3, 1, 2]), memory_format=torch.contiguous_format)


DIRECT_CHANNELS = 3
"""Fewest input and output channels for which a stride-1 convolution's
forward and input gradient are left to IREE's direct channels-last
convolution (``decompositions(direct=True)``, ``passes/conv_channels_last``).
Single convolutions, iree-benchmark-module, direct / im2col matmul, ms:
LeNet-5's conv2 at batch 64 (6 -> 16 channels, 5x5) 0.26 / 1.06, its input
gradient (16 -> 6) 0.57 / 3.14, 3 -> 16 channels 0.43 / 1.07, 4 -> 16
0.20 / 0.39; the MNIST CNN's conv2 (32 -> 64, 3x3) 7.0 / 13.3. With one
input channel the direct form is the slower: 1 -> 6 channels 2.87 / 0.90,
1 -> 32 3.42 / 0.61. Whole training-step modules went from 4.8 to 2.9 ms
(LeNet-5, batch 64) and from 56 to 48 ms (MNIST CNN, batch 64)."""


def _direct(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Enough channels, and float32 only: ``conv_channels_last`` rewrites no
    other type (a float64 convolution stays an im2col matmul here); and maps
    more than one row tall: a 1-d convolution (``_one_d``, height 1) of 128
    channels, kernel 1, 399 positions, trained at 11.4 ms a step as IREE's
    direct convolution against eager's 1.6."""
    return (x.shape[1] >= DIRECT_CHANNELS and weight.shape[0] >= DIRECT_CHANNELS
            and x.dtype == torch.float32 and x.shape[2] > 1)


DIRECT_MIN_WIDTH = 8
"""Narrowest output (columns) left to the direct convolution: IREE vectorizes
its output columns by a divisor of the width (``conv_channels_last``), and
on the maps at the end of a ResNet it crawled. The medium ResNet's 3x3
convolutions of 512 channels on 2x2 maps (batch 8) ran at 4-5 GFLOP/s (35 ms
each), 256 channels on 4x4 at 10-23; as im2col matmuls they are data-tiled
matmuls. Narrower input gradients, and strided ones, are col2im matmuls
(``_input_grad_col2im``)."""


def _wide_enough(width: int) -> bool:
    return width >= DIRECT_MIN_WIDTH


def _padding_within_window(weight, padding, dilation) -> bool:
    """What ``_input_grad_direct`` needs: dY is padded by d*(K-1)-p >= 0."""
    return all(padding[i] <= dilation[i] * (weight.shape[2 + i] - 1) for i in (0, 1))


def _input_grad_direct(grad_out, weight, h, w, stride, padding, dilation, groups=1):
    """The input gradient [N, C, H, W] of a convolution as a stride-1
    convolution: dY spread out by the stride (zeros between its rows and
    columns), padded to H + d*(K-1) rows (d*(K-1)-p on top) and as many
    columns, convolved with the weight flipped in space, O and C swapped
    (a depthwise convolution's ``groups`` of one channel: only flipped).
    dY is spread and padded channels last, the layout the channels-last
    convolution reads: padded channels first, IREE folded the layout change
    into the convolution's input (a channel-strided read, 20x slower)."""
    n, o, oh, ow = grad_out.shape
    kh, kw = weight.shape[2], weight.shape[3]
    dy = aten.permute(grad_out, [0, 2, 3, 1])                # [N, OH, OW, O]
    sh, sw = stride
    if sh != 1 or sw != 1:  # [N, OH, 1, OW, 1, O] with zeros after each row and column
        dy = aten.constant_pad_nd(aten.reshape(dy, [n, oh, 1, ow, 1, o]),
                                  [0, 0, 0, sw - 1, 0, 0, 0, sh - 1], 0.0)
        dy = aten.slice(aten.slice(aten.reshape(dy, [n, oh * sh, ow * sw, o]),
                                   1, 0, (oh - 1) * sh + 1), 2, 0, (ow - 1) * sw + 1)
    top, left = dilation[0] * (kh - 1) - padding[0], dilation[1] * (kw - 1) - padding[1]
    bottom = h - 1 + padding[0] - (oh - 1) * sh
    right = w - 1 + padding[1] - (ow - 1) * sw
    dy = aten.constant_pad_nd(dy, [0, 0, left, right, top, bottom], 0.0)
    flipped = aten.flip(weight, [2, 3])
    if groups == 1:
        flipped = aten.permute(flipped, [1, 0, 2, 3])
    return aten.convolution(aten.permute(dy, [0, 3, 1, 2]), flipped, None, [1, 1], [0, 0],
                            dilation, False, [0, 0], groups)


WGRAD_CHUNK_BYTES = 6 << 20
"""Largest im2col block of the weight gradient made at once. Larger ones are
made and multiplied a batch slice at a time (``_weight_grad``), the products
summed: the block is still in the cache when its matmul reads it.
The MNIST CNN's conv2 im2col is 42 MB at batch 64 (36864 x 288 floats): in
slices of 8 images (5.3 MB) its training-step module ran in 38-41 ms against
42-46 ms in one piece (iree-benchmark-module, alternating runs); slices of 4
did the same, of 16 images less well (~42 ms)."""

MAX_WGRAD_CHUNKS = 16
"""Most slices: each is a gather and a matmul dispatch of its own."""

MIN_WGRAD_CHUNK_ROWS = 4096
"""Fewest output positions (the matmul's depth) in a slice: two 28x28 images
a slice (K = 1568, for 5x5 windows of 32 channels) ran their matmuls at
65-69 GFLOP/s against ~190 for the CNN's slices of 4608."""


SPLIT_K_MAX_CHANNELS = 16
"""Most output channels for which a weight gradient that fits one im2col
block is split along its depth (``_split_k_slices``). IREE's CPU matmul gives
each workgroup the whole depth of a tile of rows (8 output channels) and
columns: LeNet-5's weight gradients at batch 64 ran as 1 workgroup (conv1,
``dW[6, 25]`` over 50176 positions, 0.95 ms) and 6 (conv2, ``dW[16, 150]``
over 6400, 1.13 ms), one core idle; as a batch matmul of 32 slices summed,
0.34 and 0.65 ms (in-module, ``benchmarks/dispatch_profile.py``). The MNIST
CNN's conv1 (32 channels: 8 workgroups) ran no faster so (0.61 against 0.60
ms) and its extra encode cost 0.3 ms: it stays one matmul."""

SPLIT_K_MAX_OUTPUTS = 4096
"""Most weight-gradient elements (O * KH*KW*C) split: a larger gradient has
columns enough for every core."""

SPLIT_K_SLICES = 32
"""Most slices: 8 and 16 slices left LeNet-5's conv2 gradient at 1.20 and
0.91 ms, against 0.65 with 32."""


def _split_k_slices(n: int, o: int, kc: int) -> int:
    """Batch slices for the weight gradient ``dW[O, KC]`` of ``n`` images: the
    largest divisor of ``n`` up to ``SPLIT_K_SLICES`` when ``dW`` is small
    enough to leave cores idle, else 1 (one matmul)."""
    if o > SPLIT_K_MAX_CHANNELS or o * kc > SPLIT_K_MAX_OUTPUTS:
        return 1
    return max(d for d in range(1, min(n, SPLIT_K_SLICES) + 1) if n % d == 0)


def _weight_grad(dy, x, kh, kw, stride, padding, dilation, split_k=False):
    """``dW[O, C*K] = dY[N*L, O]^T @ cols[N*L, C*K]``, over batch slices of at
    most ``WGRAD_CHUNK_BYTES`` of im2col when the whole is larger; with
    ``split_k`` (cpu) a small ``dW`` in one block is a batch matmul over
    ``_split_k_slices`` slices of the batch, summed."""
    n, c = x.shape[0], x.shape[1]
    rows = dy.shape[0] // n  # output positions of one image
    per_image = rows * kh * kw * c * x.element_size()
    most = max(1, WGRAD_CHUNK_BYTES // per_image, -(-MIN_WGRAD_CHUNK_ROWS // rows))
    slices = min(MAX_WGRAD_CHUNKS, n, -(-n // most))
    o, kc = dy.shape[1], kh * kw * c
    parts = _split_k_slices(n, o, kc) if split_k and slices == 1 else 1
    if parts > 1:
        cols, _, _ = _cols(x, kh, kw, stride, padding, dilation)
        depth = dy.shape[0] // parts
        dy_t = aten.permute(aten.reshape(dy, [parts, depth, o]), [0, 2, 1])  # [S, O, depth]
        return aten.sum(aten.bmm(dy_t, aten.reshape(cols, [parts, depth, kc])), [0])
    images = -(-n // slices)  # even slices: 64 images at most 9 a slice are 8 of 8
    dw = None
    for start in range(0, n, images):
        stop = min(n, start + images)
        part = x if stop - start == n else aten.slice(x, 0, start, stop)
        cols, _, _ = _cols(part, kh, kw, stride, padding, dilation)
        dy_t = aten.t(dy if stop - start == n else aten.slice(dy, 0, start * rows, stop * rows))
        part_dw = aten.mm(dy_t, cols)
        dw = part_dw if dw is None else aten.add(dw, part_dw)
    return dw


def _pairs(*args):
    """stride, padding, dilation as 2-lists (ATen repeats a 1-list over the
    spatial dims: ``conv2d(padding='valid')`` records ``[0]``); None if any
    has another length."""
    out = [list(a) * 2 if len(a) == 1 else list(a) for a in args]
    return out if all(len(a) == 2 for a in out) else None


def _one_d(x, weight, transposed, groups) -> bool:
    """A 1-d convolution this pass rewrites as a 2-d one of height 1: ungrouped
    or depthwise, float, not transposed. torch-mlir lowers a 1-d one to
    ``linalg.conv_1d_ncw_fcw``, which IREE runs as generic loops: a wav2vec2
    feature encoder's 64 -> 128 channel layer (kernel 3, stride 2, 799
    positions, batch 2) took 8 ms forward against eager's 0.2, and its
    training step 44 against 1.5; every audio model of the sweep trained at
    2-14x eager's step."""
    return (x.dim() == 3 and weight.dim() == 3 and not transposed
            and x.dtype.is_floating_point and weight.dtype == x.dtype
            and (groups == 1 or (groups == x.shape[1] == weight.shape[0]
                                 and weight.shape[1] == 1)))


def _as_2d(stride, padding, dilation, output_padding, groups):
    """A 1-d convolution's arguments from ``stride`` on, for its 2-d form
    (height 1; ATen's 1-lists, repeated by it over the dims)."""
    return ([1, stride[0]], [0, padding[0]], [1, dilation[0]], False,
            [0, output_padding[0]] if output_padding else [0, 0], groups)


@register_decomposition(aten.convolution.default, scope=TARGET)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups, direct=False):
    if _one_d(x, weight, transposed, groups):  # (the 2-d form is decomposed in turn)
        out = aten.convolution(aten.unsqueeze(x, 2), aten.unsqueeze(weight, 2), bias,
                               *_as_2d(stride, padding, dilation, output_padding, groups))
        return aten.squeeze(out, [2])
    pairs = _pairs(stride, padding, dilation)
    if pairs is None:
        return NotImplemented
    stride, padding, dilation = pairs
    if not _rewritable(x, weight, transposed, groups) or not _deep(x.shape[1], weight):
        return NotImplemented
    out_width = x.shape[3] + 2 * padding[1] - dilation[1] * (weight.shape[3] - 1)  # stride 1
    if direct and tuple(stride) == (1, 1) and _direct(x, weight) and _wide_enough(out_width):
        return NotImplemented
    out = _forward(x, weight, stride, padding, dilation)
    if bias is not None:
        out = aten.add(out, aten.reshape(bias, [1, -1, 1, 1]))
    return aten.clone(out, memory_format=torch.contiguous_format)


def _depthwise(x, weight, transposed, groups) -> bool:
    """A depthwise convolution: one filter per channel (``groups`` = C = O)."""
    return (x.dim() == 4 and weight.dim() == 4 and not transposed and groups > 1
            and x.shape[1] == groups and weight.shape[0] == groups and weight.shape[1] == 1
            and x.dtype.is_floating_point and weight.dtype == x.dtype)


def _depthwise_backward(grad_out, x, weight, stride, padding, dilation, output_mask):
    """A depthwise convolution's gradients. torch-mlir 20261001 lowers its
    weight gradient to a ``linalg.conv_2d_ngchw_gfchw`` that fails to verify
    (so the whole graph ran eagerly). Weight: the windows of each channel
    times dY, summed over the batch and positions (``dW[KH, KW, C]``); input:
    a depthwise convolution of the spread, padded dY (``_input_grad_direct``);
    bias: dY summed."""
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = _input_grad_direct(grad_out, weight, x.shape[2], x.shape[3], stride,
                                        padding, dilation, groups=c)
    dy = aten.permute(grad_out, [0, 2, 3, 1])                # [N, OH, OW, C]
    if output_mask[1]:  # the windows stay a view: IREE reads them inside the reduction
        windows = _windows(x, kh, kw, stride, padding, dilation)  # [N, OH, OW, KH, KW, C]
        n, oh, ow = windows.shape[0], windows.shape[1], windows.shape[2]
        dw = aten.sum(aten.mul(windows, aten.reshape(dy, [n, oh, ow, 1, 1, c])), [0, 1, 2])
        grad_weight = aten.clone(aten.unsqueeze(aten.permute(dw, [2, 0, 1]), 1),
                                 memory_format=torch.contiguous_format)
    if output_mask[2]:
        grad_bias = aten.sum(dy, [0, 1, 2])
    return grad_input, grad_weight, grad_bias


@register_decomposition(aten.convolution_backward.default, scope=TARGET)
def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask, direct=False,
                         split_k=False):
    """Weight gradient ``dW[O, C*K] = dY[N*L, O]^T @ cols[N*L, C*K]`` (any
    stride); input gradient with ``direct`` as a direct convolution
    (``_input_grad_direct``: stride 1, at least ``DIRECT_MIN_WIDTH`` wide)
    or else a col2im matmul (``_input_grad_col2im``); without ``direct`` by
    ``_input_grad`` (stride 1) or torch-mlir's lowering (other strides)."""
    if _one_d(x, weight, transposed, groups):  # as ``convolution``: height 1
        grads = aten.convolution_backward(
            aten.unsqueeze(grad_out, 2), aten.unsqueeze(x, 2), aten.unsqueeze(weight, 2),
            bias_sizes, *_as_2d(stride, padding, dilation, output_padding, groups), output_mask)
        return tuple(aten.squeeze(g, [2]) if g is not None and k < 2 else g
                     for k, g in enumerate(grads))
    pairs = _pairs(stride, padding, dilation)
    if pairs is None:
        return NotImplemented
    stride, padding, dilation = pairs
    if (_depthwise(x, weight, transposed, groups) and grad_out.dtype == x.dtype
            and _padding_within_window(weight, padding, dilation)):
        return _depthwise_backward(grad_out, x, weight, stride, padding, dilation, output_mask)
    if not _rewritable(x, weight, transposed, groups) or grad_out.dtype != x.dtype:
        return NotImplemented
    if ((output_mask[0] and not _deep(weight.shape[0], weight))
            or (output_mask[1] and not _deep(x.shape[1], weight))):
        return NotImplemented
    o, c, kh, kw = weight.shape
    h, w = x.shape[2], x.shape[3]
    strided = tuple(stride) != (1, 1)
    direct_input = (output_mask[0] and direct and _direct(x, weight) and not strided
                    and _padding_within_window(weight, padding, dilation) and _wide_enough(w))
    col2im_input = output_mask[0] and direct and not direct_input
    torch_mlir_input = output_mask[0] and strided and not (direct_input or col2im_input)
    if torch_mlir_input and not (output_mask[1] or output_mask[2]):
        return NotImplemented  # nothing else to rewrite: torch-mlir's lowering, as it is
    grad_input = grad_weight = grad_bias = None
    dy = _rows(grad_out)                                     # [N*OH*OW, O]
    if direct_input:
        grad_input = _input_grad_direct(grad_out, weight, h, w, stride, padding, dilation)
    elif col2im_input:
        grad_input = _input_grad_col2im(grad_out, weight, h, w, stride, padding, dilation)
    elif torch_mlir_input:  # the op again, input gradient only: it returns NotImplemented
        grad_input = aten.convolution_backward(grad_out, x, weight, None, stride, padding,
                                               dilation, False, [0, 0], 1,
                                               [True, False, False])[0]
    elif output_mask[0]:
        grad_input = aten.clone(_input_grad(grad_out, weight, h, w, padding, dilation),
                                memory_format=torch.contiguous_format)
    if output_mask[1]:
        dw = _weight_grad(dy, x, kh, kw, stride, padding, dilation, split_k)  # [O, C*K]
        grad_weight = aten.reshape(dw, [o, c, kh, kw])     # the weight's own layout
    if output_mask[2]:  # from the rows: no second (channels-first) copy of dY
        grad_bias = _bias_grad(dy, x.shape[0], o)
    return grad_input, grad_weight, grad_bias


def _bias_grad(dy, n: int, o: int):
    """``dY[N*L, O]`` summed over its rows, per image first: as one sum IREE
    reduced the O columns in O/8 tiles, 1.24 ms for the MNIST CNN's conv2
    (9.4 MB, 7.6 GB/s) and 0.65 ms for conv1; per image, 0.67 and 0.15 ms,
    and the step module ran 0.974x (median of 6 paired iree-benchmark-module
    runs)."""
    if n == 1:
        return aten.sum(dy, [0])
    return aten.sum(aten.sum(aten.reshape(dy, [n, -1, o]), [1]), [0])


def decompositions(direct: bool = False, split_k: bool = False) -> dict:
    """The table for ``make_fx`` (a function returning ``NotImplemented``
    keeps the op); ``direct``: stride-1 forwards and input gradients at
    least ``DIRECT_MIN_WIDTH`` wide with ``DIRECT_CHANNELS`` go to IREE's
    direct convolution (``_direct``), other input gradients are col2im
    matmuls; ``split_k``: small weight gradients are split along their
    depth (``_split_k_slices``, measured on cpu)."""
    return {aten.convolution.default: functools.partial(convolution, direct=direct),
            aten.convolution_backward.default: functools.partial(
                convolution_backward, direct=direct, split_k=split_k)}


DECOMPOSITIONS = decompositions()
