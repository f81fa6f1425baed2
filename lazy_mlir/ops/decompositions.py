"""Decompositions of our own, for ops torch-mlir imports but cannot lower.

Each maps an aten op to aten ops torch-mlir lowers; each returns
``NotImplemented`` for the cases it does not cover, which then keep the op
(and fall back if it fails to compile).
"""
from __future__ import annotations

import torch

from .bool_decompositions import BOOL_DECOMPOSITIONS
from .compare_decompositions import COMPARE_DECOMPOSITIONS
from .ieee_decompositions import IEEE_DECOMPOSITIONS
from .index_decompositions import wrap_negative_indices
from .nan_decompositions import nan_aware_arg_reductions
from .special_gamma_decompositions import SPECIAL_IMPORT_DECOMPOSITIONS
from .sort_decompositions import SORT_IMPORT_DECOMPOSITIONS
from .scan_decompositions import SCAN_IMPORT_DECOMPOSITIONS
from .lowering_decompositions import LOWERING_DECOMPOSITIONS

aten = torch.ops.aten


def _pair(v):
    return [v[0], v[0]] if len(v) == 1 else list(v)


def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    """The input gradient of average pooling is a transposed convolution of
    the output gradient with a constant 1/(kh*kw) kernel, each channel on its
    own (channels folded into the batch: torch-mlir 20261001 miscompiles
    grouped transposed convolutions)."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    ph, pw = _pair(padding)
    if ceil_mode or divisor_override or (not count_include_pad and (ph or pw)) or x.dim() != 4:
        return NotImplemented
    n, c, h, w = x.shape
    weight = torch.full((1, 1, kh, kw), 1.0 / (kh * kw), dtype=grad.dtype, device=grad.device)
    oh = h - ((grad.shape[2] - 1) * sh - 2 * ph + kh)
    ow = w - ((grad.shape[3] - 1) * sw - 2 * pw + kw)
    folded = aten.reshape.default(grad, [n * c, 1, grad.shape[2], grad.shape[3]])
    out = aten.convolution.default(folded, weight, None, [sh, sw], [ph, pw], [1, 1], True,
                                   [oh, ow], 1)
    return aten.reshape.default(out, [n, c, h, w])


def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    """Inference batch norm as ``_native_batch_norm_legit_no_training`` (what
    torch.export emits). PyTorch's own decomposition returns empty saved
    statistics in eval mode while the meta kernel (and so the captured graph)
    gives them the channel count; the statistics are unused in eval, so they
    come back as the running statistics to keep the shapes the graph expects."""
    if training:
        return NotImplemented
    out = aten._native_batch_norm_legit_no_training.default(input, weight, bias, running_mean,
                                                             running_var, momentum, eps)[0]
    return out, aten.clone.default(running_mean), aten.clone.default(running_var)


DECOMPOSITIONS = {
    **LOWERING_DECOMPOSITIONS,  # torch-mlir gaps: 0-d reductions, *_copy views, log10
    aten.native_batch_norm.default: native_batch_norm,
    aten.avg_pool2d_backward.default: avg_pool2d_backward,
    **IEEE_DECOMPOSITIONS,  # pow and atan2 special values
    **BOOL_DECOMPOSITIONS,  # bool operands of ops lowered as signed i1
    **COMPARE_DECOMPOSITIONS,  # float tensor vs int number: a wrong fold
    **SPECIAL_IMPORT_DECOMPOSITIONS,  # erfc, erfcx, lgamma: made by log_ndtr's and mvlgamma's
    **SORT_IMPORT_DECOMPOSITIONS,  # a stable sort with NaN placed as eager
    **SCAN_IMPORT_DECOMPOSITIONS,  # searchsorted as ATen's bisection (isin, bucketize)
}
# Last: these chain to the entries above (bool index_put, 0-d argmax).
DECOMPOSITIONS.update(wrap_negative_indices(DECOMPOSITIONS))
DECOMPOSITIONS.update(nan_aware_arg_reductions(DECOMPOSITIONS))
