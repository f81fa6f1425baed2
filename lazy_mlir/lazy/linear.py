"""``F.linear`` on lazy tensors: one recorded node instead of four.

``aten::linear`` is CompositeImplicitAutograd: a linear of a 3-d input is
recorded as ``t``, ``view``, ``addmm`` and ``view``, four trips through
``__torch_dispatch__`` per call (about 50 µs of host time against 15-20 µs
for one op), and every transformer layer has six of them. The
``AutogradLazy`` kernel here (as ``lazy/attention.py`` for attention)
records ``lazy_mlir::linear`` instead (``ops/linear.py``: it becomes eager's
``addmm`` before import), under an autograd function whose backward is
eager's own formulas in aten ops: ``grad @ weight`` for the input,
``grad^T @ input`` for the weight (``mm_mat2_backward`` of the transposed
weight, then ``t``: eager's sums, and a contiguous gradient) and
``grad.sum(0)`` for the bias. The
backward is differentiable (``create_graph=True`` works), and the one-node
backward (``lazy/backward.py``) traces it once like any formula.

PyTorch's path is kept, decided per call (counted ``linear_unfused::<why>``):
tensors that are not all lazy, not all of one floating dtype, an input of
fewer than 2 dimensions, a weight that is not 2-d or a bias that is not 1-d,
a config without decompositions, the op denied by a failed compile, or
``LAZY_MLIR_FUSED_LINEAR=0``. Each fused call counts ``lazy::linear``.
"""
from __future__ import annotations

import torch

from ..config import switched_on
from ..ops import linear as _linear_ops  # noqa: F401  (defines torch.ops.lazy_mlir.linear)
from . import fused

aten = torch.ops.aten
ops = torch.ops.lazy_mlir


def unfused_reason(input, weight, bias) -> str | None:
    """Why this call takes PyTorch's composite, or None."""
    if not switched_on("LAZY_MLIR_FUSED_LINEAR"):
        return "switched off"
    if not fused.all_lazy((input, weight, bias)):
        return "not all lazy"
    dtype = input.dtype
    if not dtype.is_floating_point or weight.dtype != dtype or (
            bias is not None and bias.dtype != dtype):
        return "dtypes"
    if input.dim() < 2 or weight.dim() != 2 or (bias is not None and bias.dim() != 1):
        return "shapes"
    return fused.compile_reason(ops.linear.default)


class _Linear(torch.autograd.Function):
    @staticmethod
    def _compiled_autograd_key(ctx):
        """Compiled autograd (``lazy/backward.py``) caches a backward by this key;
        the one-node backward bakes in which gradients are computed."""
        return (ctx._autograd_function_id, *(int(n) for n in ctx.needs_input_grad))

    @staticmethod
    def forward(ctx, input, weight, bias):
        ctx.save_for_backward(input, weight)
        ctx.set_materialize_grads(False)
        return ops.linear.default(input, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        if grad is None:
            return None, None, None
        input, weight = ctx.saved_tensors
        need_input, need_weight, need_bias = ctx.needs_input_grad
        rows = grad.flatten(0, -2)
        grad_input = grad_weight = grad_bias = None
        if need_input:
            grad_input = torch.mm(rows, weight).reshape(input.shape)
        if need_weight:
            grad_weight = torch.mm(rows.t(), input.flatten(0, -2))
        if need_bias:
            grad_bias = rows.sum(0)
        return grad_input, grad_weight, grad_bias


def linear(input, weight, bias=None):
    """The ``AutogradLazy`` kernel of ``aten::linear``."""
    why = unfused_reason(input, weight, bias)
    if why is not None:
        return fused.composite("linear", why, aten.linear.default, input, weight, bias)
    if torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad or (
            bias is not None and bias.requires_grad)):
        return _Linear.apply(input, weight, bias)
    return ops.linear.default(input, weight, bias)


def register(lib: torch.library.Library) -> None:
    """Install the kernel on ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("linear", linear, "AutogradLazy")
