"""Convolutions and their gradients as im2col + one plain matmul (an fx pass).

IREE's CPU backend runs ``linalg.matmul`` through data tiling and its
microkernels (~200 GFLOP/s on this class of machine) but convolutions, and
above all the weight gradient of a 3x3 convolution, through generic loops
that reach a few GFLOP/s. Its own ``--iree-global-opt-use-im2col-for-convs``
leaves a 4-d ``matmul_like`` contraction that misses the microkernels (and is
wrong on Vulkan from batch 4 on). Here each 2-d convolution becomes strided
slices (im2col, a copy), one 2-d ``aten.mm`` and transposes:

- forward: ``out[O, N*L] = W[O, C*K] @ cols[C*K, N*L]``
- weight gradient: ``dW[O, C*K] = dY[O, N*L] @ cols[C*K, N*L]^T``
- input gradient (stride 1): the forward form on the padded ``dY`` with the
  flipped, transposed weight; other strides keep the convolution.

Only ungrouped, non-transposed 2-d float convolutions are rewritten; the rest
stay ``aten.convolution`` / ``aten.convolution_backward`` (torch-mlir lowers
them). Applied as a decomposition table while ``pipeline.fx_graph.decompose``
re-traces, so every new node has its fake value.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


MIN_DEPTH = 64
"""Smallest contraction depth (C*KH*KW; O*KH*KW for the input gradient) worth
a matmul: below it (e.g. a first layer with one input channel) the native
convolution was faster than the copy plus a thin matmul."""


def _rewritable(x: torch.Tensor, weight: torch.Tensor, transposed: bool, groups: int) -> bool:
    return (x.dim() == 4 and weight.dim() == 4 and not transposed and groups == 1
            and x.dtype.is_floating_point and weight.dtype == x.dtype)


MIN_COLUMNS = 1024
"""Smallest N*OH*OW worth it: below it (LeNet-5 at batch 1) the extra copy
and dispatches cost more than the convolution."""


def _deep(channels: int, weight: torch.Tensor) -> bool:
    return channels * weight.shape[2] * weight.shape[3] >= MIN_DEPTH


def _wide(x: torch.Tensor, weight: torch.Tensor, stride, padding, dilation) -> bool:
    n, _, h, w = x.shape
    return n * _out_size(h, weight.shape[2], stride[0], padding[0], dilation[0]) * _out_size(
        w, weight.shape[3], stride[1], padding[1], dilation[1]) >= MIN_COLUMNS


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _cols(x, kh, kw, stride, padding, dilation):
    """im2col of ``x`` [N, C, H, W] as [C*KH*KW, N*OH*OW] (row c*KH*KW + k).
    Unpadded: ``aten.unfold`` windows, which lower to one gather-like
    ``linalg.generic`` that IREE fuses with the transpose into one copy.
    Padded: strided slices of the padded input (IREE code-generates the
    unfold gather with the pad fused in poorly: several times slower)."""
    n, c, h, w = x.shape
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(w, kw, stride[1], padding[1], dilation[1])
    xt = aten.permute(x, [1, 0, 2, 3])                       # [C, N, H, W]
    if padding[0] or padding[1]:
        xt = aten.constant_pad_nd(xt, [padding[1], padding[1], padding[0], padding[0]], 0.0)
        pieces = []
        for i in range(kh):
            for j in range(kw):
                h0, w0 = i * dilation[0], j * dilation[1]
                piece = aten.slice(xt, 2, h0, h0 + (oh - 1) * stride[0] + 1, stride[0])
                pieces.append(aten.slice(piece, 3, w0, w0 + (ow - 1) * stride[1] + 1, stride[1]))
        cols = aten.stack(pieces, 1)                         # [C, K, N, OH, OW]
    else:
        win = aten.unfold(xt, 2, (kh - 1) * dilation[0] + 1, stride[0])   # [C, N, OH, W, span]
        win = aten.unfold(win, 3, (kw - 1) * dilation[1] + 1, stride[1])  # [C, N, OH, OW, sh, sw]
        if dilation[0] != 1 or dilation[1] != 1:
            win = aten.slice(aten.slice(win, 4, 0, None, dilation[0]), 5, 0, None, dilation[1])
        cols = aten.permute(win, [0, 4, 5, 1, 2, 3])         # [C, KH, KW, N, OH, OW]
    return aten.reshape(cols, [c * kh * kw, n * oh * ow]), oh, ow


def _forward(x, weight, stride, padding, dilation):
    """conv2d(x, weight) without bias, as [N, O, OH, OW]."""
    o, _, kh, kw = weight.shape
    cols, oh, ow = _cols(x, kh, kw, stride, padding, dilation)
    out = aten.mm(aten.reshape(weight, [o, -1]), cols)      # [O, N*OH*OW]
    out = aten.reshape(out, [o, x.shape[0], oh, ow])
    return aten.permute(out, [1, 0, 2, 3])


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    if (not _rewritable(x, weight, transposed, groups) or not _deep(x.shape[1], weight)
            or not _wide(x, weight, stride, padding, dilation)):
        return NotImplemented
    out = _forward(x, weight, stride, padding, dilation)
    if bias is not None:
        out = aten.add(out, aten.reshape(bias, [1, -1, 1, 1]))
    return aten.clone(out, memory_format=torch.contiguous_format)


def convolution_backward(grad_out, x, weight, bias_sizes, stride, padding, dilation,
                         transposed, output_padding, groups, output_mask):
    if (not _rewritable(x, weight, transposed, groups) or grad_out.dtype != x.dtype
            or not _wide(x, weight, stride, padding, dilation)):
        return NotImplemented
    if ((output_mask[0] and not _deep(weight.shape[0], weight))
            or (output_mask[1] and not _deep(x.shape[1], weight))):
        return NotImplemented
    o, c, kh, kw = weight.shape
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        pad_h = (kh - 1) * dilation[0] - padding[0]
        pad_w = (kw - 1) * dilation[1] - padding[1]
        if tuple(stride) != (1, 1) or pad_h < 0 or pad_w < 0:
            return NotImplemented
        flipped = aten.permute(aten.flip(weight, [2, 3]), [1, 0, 2, 3])  # [C, O, KH, KW]
        grad_input = aten.clone(_forward(grad_out, flipped, [1, 1], [pad_h, pad_w], dilation),
                                memory_format=torch.contiguous_format)
    if output_mask[1]:
        cols, _, _ = _cols(x, kh, kw, stride, padding, dilation)
        dy = aten.reshape(aten.permute(grad_out, [1, 0, 2, 3]), [o, -1])  # [O, N*OH*OW]
        grad_weight = aten.reshape(aten.mm(dy, aten.t(cols)), [o, c, kh, kw])
    if output_mask[2]:
        grad_bias = aten.sum(grad_out, [0, 2, 3])
    return grad_input, grad_weight, grad_bias


DECOMPOSITIONS = {
    aten.convolution.default: convolution,
    aten.convolution_backward.default: convolution_backward,
}
"""For ``make_fx``: a function returning ``NotImplemented`` keeps the op."""
