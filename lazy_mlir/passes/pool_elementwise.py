"""Non-overlapping max and average pooling and their gradients as elementwise
ops (an fx pass).

torch-mlir lowers ``max_pool2d_with_indices`` to a pooling op for the values
plus a separate windowed reduction for the indices, and its backward to a
scatter; on IREE's CPU backend the three took ~12 ms of one core in the MNIST
CNN step (64x64x24x24 input), and the scatter's channels-first result forced
a transposing copy before the channels-last matmuls of ``conv_matmul``.
When the windows do not overlap (stride == kernel, no padding, no dilation)
every input element belongs to one window, so:

- forward: the KH*KW candidates of each window are strided views of the input;
  a running ``(val > max) | isnan(val)`` scan in ATen's order gives the same
  value and index as ATen's CPU kernel (first maximum, last NaN, the first
  element of an all ``-inf`` window);
- backward: ``grad_input = where(indices == position, grad_output, 0)`` with
  ``grad_output`` and ``indices`` broadcast over each window: one elementwise
  op that fuses with its neighbours (the ReLU mask), no scatter.

Average pooling (``avg_pool2d``) over such windows is the sum of the KH*KW
strided views in ATen's order divided by KH*KW (or ``divisor_override``),
and its gradient ``grad_output / divisor`` broadcast over each window. torch-
mlir lowers them to a pooling op and a transposed convolution on channels-
first tensors, each with a transposing copy next to the channels-last
matmuls of ``conv_matmul`` (LeNet-5's two average pools).

Anything else (overlapping windows, padding, dilation, ceil_mode with a
partial window, non-float inputs) returns ``NotImplemented`` and stays the
aten op. Applied with ``conv_matmul`` (``PipelineConfig.conv_as_matmul``).
"""
from __future__ import annotations

import torch

from ..ops.registry import TARGET, register_decomposition

aten = torch.ops.aten


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return (v, v)
    return tuple(v) * 2 if len(v) == 1 else tuple(v)


def _windows(x, kernel_size, stride, padding, dilation, ceil_mode):
    """(KH, KW, OH, OW) when the pooling has non-overlapping, unpadded windows
    this pass handles; else None."""
    if x.dim() != 4 or not x.dtype.is_floating_point:
        return None
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride, (kh, kw))
    if (sh, sw) != (kh, kw) or _pair(padding, (0, 0)) != (0, 0) or _pair(dilation, (1, 1)) != (1, 1):
        return None
    h, w = x.shape[2], x.shape[3]
    if ceil_mode and (h % kh or w % kw):  # a partial last window
        return None
    oh, ow = h // kh, w // kw
    if oh == 0 or ow == 0 or x.numel() == 0:
        return None
    return kh, kw, oh, ow


def _positions(kh, kw, oh, ow, width, device):
    """[OH, KH, OW, KW] int64: the flat index h*W + w of each window element."""
    rows = aten.arange(oh * kh, dtype=torch.int64, device=device)
    cols = aten.arange(ow * kw, dtype=torch.int64, device=device)
    flat = aten.add(aten.mul(aten.reshape(rows, [oh * kh, 1]), width),
                    aten.reshape(cols, [1, ow * kw]))
    return aten.reshape(flat, [oh, kh, ow, kw])


def _window_grid(x, kh, kw, oh, ow):
    """``x`` [N, C, H, W] as [N, OH, KH, OW, KW, C]: its windows, channels last.

    Channels last inside: the convolutions of conv_matmul produce and take
    channels-last matrices, so IREE cancels these permutes against theirs and
    the layout change happens on the pooled (KH*KW times smaller) values."""
    n, c = x.shape[0], x.shape[1]
    xt = aten.permute(x, [0, 2, 3, 1])                              # [N, H, W, C]
    return aten.reshape(aten.slice(aten.slice(xt, 1, 0, oh * kh), 2, 0, ow * kw),
                        [n, oh, kh, ow, kw, c])


def _per_window(t, kh, kw):
    """``t`` [N, C, OH, OW] broadcast over each window: [N, OH, KH, OW, KW, C]."""
    n, c, oh, ow = t.shape
    return aten.expand(aten.reshape(aten.permute(t, [0, 2, 3, 1]), [n, oh, 1, ow, 1, c]),
                       [n, oh, kh, ow, kw, c])


def _channels_first(t):
    """[N, H, W, C] as a contiguous [N, C, H, W] (the layout ATen returns)."""
    return aten.clone(aten.permute(t, [0, 3, 1, 2]), memory_format=torch.contiguous_format)


def _input_grad(grad6, x):
    """A window-grid gradient [N, OH, KH, OW, KW, C] as the input's [N, C, H, W]:
    rows and columns no window covers get no gradient."""
    n, oh, kh, ow, kw, c = grad6.shape
    h, w = x.shape[2], x.shape[3]
    grad = aten.reshape(grad6, [n, oh * kh, ow * kw, c])
    if oh * kh != h or ow * kw != w:
        grad = aten.constant_pad_nd(grad, [0, 0, 0, w - ow * kw, 0, h - oh * kh], 0.0)
    return _channels_first(grad)


@register_decomposition(aten.max_pool2d_with_indices.default, scope=TARGET)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    win = _windows(x, kernel_size, stride, padding, dilation, ceil_mode)
    if win is None:
        return NotImplemented
    kh, kw, oh, ow = win
    n, c, _, w = x.shape
    x6 = _window_grid(x, kh, kw, oh, ow)
    pos = aten.unsqueeze(_positions(kh, kw, oh, ow, w, x.device), 4)  # [OH, KH, OW, KW, 1]
    best = idx = None
    for i in range(kh):  # ATen's scan order: window rows, then columns
        for j in range(kw):
            val = aten.select(aten.select(x6, 4, j), 2, i)          # [N, OH, OW, C]
            at = aten.select(aten.select(pos, 3, j), 1, i)          # [OH, OW, 1]
            if best is None:
                best, idx = val, aten.expand(at, [n, oh, ow, c])
                continue
            take = aten.logical_or(aten.gt(val, best), aten.isnan(val))
            best = aten.where(take, val, best)
            idx = aten.where(take, at, idx)
    return _channels_first(best), _channels_first(idx)


@register_decomposition(aten.max_pool2d_with_indices_backward.default, scope=TARGET)
def max_pool2d_with_indices_backward(grad_output, x, kernel_size, stride, padding, dilation,
                                     ceil_mode, indices):
    win = _windows(x, kernel_size, stride, padding, dilation, ceil_mode)
    if win is None or grad_output.dtype != x.dtype or indices.dtype != torch.int64:
        return NotImplemented
    kh, kw, oh, ow = win
    n, c, _, w = x.shape
    if tuple(grad_output.shape) != (n, c, oh, ow) or tuple(indices.shape) != (n, c, oh, ow):
        return NotImplemented
    pos = aten.unsqueeze(_positions(kh, kw, oh, ow, w, x.device), 4)
    zero = aten.scalar_tensor(0.0, dtype=x.dtype, device=x.device)
    chosen = aten.eq(_per_window(indices, kh, kw), pos)
    return _input_grad(aten.where(chosen, _per_window(grad_output, kh, kw), zero), x)


@register_decomposition(aten.avg_pool2d.default, scope=TARGET)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    win = _windows(x, kernel_size, stride, padding, 1, ceil_mode)
    if win is None:
        return NotImplemented
    kh, kw, oh, ow = win
    x6 = _window_grid(x, kh, kw, oh, ow)
    total = None
    for i in range(kh):  # ATen's order: window rows, then columns
        for j in range(kw):
            val = aten.select(aten.select(x6, 4, j), 2, i)          # [N, OH, OW, C]
            total = val if total is None else aten.add(total, val)
    return _channels_first(aten.div(total, divisor_override or kh * kw))


@register_decomposition(aten.avg_pool2d_backward.default, scope=TARGET)
def avg_pool2d_backward(grad_output, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override):
    win = _windows(x, kernel_size, stride, padding, 1, ceil_mode)
    if win is None or grad_output.dtype != x.dtype:
        return NotImplemented
    kh, kw, oh, ow = win
    if tuple(grad_output.shape) != (x.shape[0], x.shape[1], oh, ow):
        return NotImplemented
    g = aten.div(grad_output, divisor_override or kh * kw)
    return _input_grad(_per_window(g, kh, kw), x)


DECOMPOSITIONS = {
    aten.avg_pool2d.default: avg_pool2d,
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    aten.max_pool2d_with_indices.default: max_pool2d_with_indices,
    aten.max_pool2d_with_indices_backward.default: max_pool2d_with_indices_backward,
}
"""For ``make_fx``: a function returning ``NotImplemented`` keeps the op."""
