"""``F.linear`` as one node.

``aten::linear`` is CompositeImplicitAutograd: on the lazy device a linear of
a 3-d input is four recorded calls (``t`` of the weight, a ``view`` to 2-d,
``addmm``, a ``view`` back), each a trip through ``__torch_dispatch__``, and a
transformer layer has six of them. ``lazy/linear.py`` records
``lazy_mlir::linear(input, weight, bias)`` instead, once per call.

Before torch-mlir imports the graph (IMPORT scope) it becomes the ops eager's
composite runs (``addmm`` of the input as 2-d and ``weight.t()``, or ``mm``
without a bias, reshaped back), so the lowering and the passes that match
matmuls (host BLAS calls, bf16 mixed precision) see what they saw before.
The same function is the op's CPU kernel.
"""
from __future__ import annotations

import torch

from .registry import IMPORT, register_decomposition

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor")

ops = torch.ops.lazy_mlir


def linear(input, weight, bias=None):
    """``input @ weight.t() + bias`` over the last dimension of ``input``."""
    flat = input.flatten(0, -2)  # (not reshape(-1, k): k may be 0)
    if bias is None:
        out = torch.mm(flat, weight.t())
    else:
        out = torch.addmm(bias, flat, weight.t())
    return out.reshape(*input.shape[:-1], weight.shape[0])


def _linear_shape(input, weight, bias=None):
    return input.new_empty((*input.shape[:-1], weight.shape[0]))


_LIB.impl("linear", linear, "CompositeExplicitAutograd")
torch.library.register_fake("lazy_mlir::linear", _linear_shape, lib=_LIB)
register_decomposition(ops.linear.default, scope=IMPORT)(linear)
