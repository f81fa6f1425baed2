"""A transposed convolution's gradients as ordinary convolutions.

torch-mlir 20261001 does not lower ``convolution_backward`` of a transposed
convolution ("failed to legalize operation 'torch.aten.convolution_backward'"),
so every graph with a ``ConvTranspose1d/2d/3d`` backward (GAN generators,
U-Net decoders, autoencoders, vocoders) ran eagerly. A transposed
convolution is the adjoint of the ordinary convolution with the same weight,
stride, padding, dilation and groups, so with ``y = conv_transpose(x, W)``:

- ``dx = conv(dy, W)``, the forward convolution of the output gradient
  (``W`` [C_in, C_out/g, k...] is that convolution's [out, in/g, k...]);
- ``dW``: the ordinary convolution's weight gradient with the roles swapped
  (``dy`` its input, ``x`` its output gradient), which torch-mlir lowers and
  ``passes/conv_matmul`` rewrites as a matmul on the cpu target;
- ``db``: ``dy`` summed over all but the channel dimension.

``output_padding`` only adds rows the ordinary convolution of ``dy`` never
reaches (``output_padding < stride`` or ``< dilation``), so it needs nothing.
"""
from __future__ import annotations

import torch

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten


@register_decomposition(aten.convolution_backward.default, scope=IMPORT)
def transposed_convolution_backward(grad_out, x, weight, bias_sizes, stride, padding,
                                    dilation, transposed, output_padding, groups,
                                    output_mask):
    if not transposed:
        return NotImplemented
    spatial = [0] * (x.dim() - 2)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        grad_input = aten.convolution(grad_out, weight, None, stride, padding, dilation,
                                      False, spatial, groups)
    if output_mask[1]:
        grad_weight = aten.convolution_backward(x, grad_out, weight, None, stride, padding,
                                                dilation, False, spatial, groups,
                                                [False, True, False])[1]
    if output_mask[2]:
        grad_bias = aten.sum(grad_out, [0] + list(range(2, grad_out.dim())))
    return grad_input, grad_weight, grad_bias
