"""Reductions, norms, softmax and composite activations of float16 and
bfloat16 tensors computed in float32 and rounded once (import time), as
eager's CPU kernels compute them (their opmath, accumulating in float32).

torch-mlir lowers these ops in the narrow dtype: a sum or mean accumulates in
bfloat16, and a composite op (``gelu``'s erf form, ``silu``, softmax,
``layer_norm``) rounds after each of its steps. A bfloat16
model's loss was off eager's at its first step (``mean`` of a bfloat16
square: 1.3125 for 1.3046875) and ``F.normalize``, ``gelu`` and sums missed
by an ulp or more in hundreds of elements. Here each such op takes its
narrow inputs in float32, runs as it does in float32, and each output is
rounded to the dtype the op gives (read from its meta kernel), once.
Single elementwise ops need nothing: IREE computes them in float32 and
rounds once already. Not the ops eager computes as several narrow tensors
(``mse_loss``, the other losses, ``logsumexp``: an elementwise result
rounded, then its mean): torch-mlir's table decomposes them into those ops,
and their reductions come here. Chained over our own registrations of each
op, or over torch-mlir's table's entry where it has one.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten, tree_map

from .half_opmath import NARROW
from .registry import IMPORT, register_decomposition

aten = torch.ops.aten

OPS = [
    # reductions (accumulated in float32 by eager)
    aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim,
    aten.prod.default, aten.prod.dim_int, aten.cumsum.default,
    aten.linalg_vector_norm.default, aten.norm.Scalar, aten.norm.ScalarOpt_dim,
    aten.var.correction, aten.std.correction,
    aten.var_mean.correction,
    # softmax and its gradient
    aten._softmax.default, aten._log_softmax.default,
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
    # composite activations and their gradients
    aten.gelu.default, aten.gelu_backward.default, aten.silu.default,
    aten.silu_backward.default, aten.mish.default, aten.hardswish.default,
    aten.hardsigmoid.default, aten.sigmoid_backward.default, aten.tanh_backward.default,
    # norms
    aten.native_layer_norm.default, aten.native_layer_norm_backward.default,
    aten.native_group_norm.default, aten.native_group_norm_backward.default,
    # average pooling
    aten.avg_pool2d.default, aten.avg_pool2d_backward.default,
    aten._adaptive_avg_pool2d.default,
]


def _narrow_dtype(args, kwargs):
    """The one narrow float dtype among the tensor arguments, or None."""
    found = {a.dtype for a in tree_flatten((args, kwargs))[0]
             if isinstance(a, torch.Tensor) and a.dtype in NARROW}
    return found.pop() if len(found) == 1 else None


def _dtypes_of(op, args, kwargs):
    """The output dtypes of ``op`` on the narrow arguments, from its meta
    kernel (outside the trace: nothing is recorded)."""
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with disable_proxy_modes_tracing():
        return tree_map(lambda t: t.dtype if isinstance(t, torch.Tensor) else None,
                        op(*args, **kwargs))


def _in_float32(op, below):
    """The chained decomposition of ``op``: narrow inputs in float32, each
    output rounded once to its dtype; any other call goes to ``below`` (ours,
    else torch-mlir's entry, else the op itself)."""
    if below is None:
        from ..dialects.torch_ops import torch_mlir_decompositions
        below = torch_mlir_decompositions().get(op)

    def run(*args, **kwargs):
        narrow = _narrow_dtype(args, kwargs)
        if narrow is None:
            return below(*args, **kwargs) if below is not None else NotImplemented
        want = _dtypes_of(op, args, kwargs)
        wide_args, wide_kwargs = tree_map(
            lambda a: a.to(torch.float32) if isinstance(a, torch.Tensor) and a.dtype == narrow
            else a, (args, kwargs))
        if "dtype" in wide_kwargs and wide_kwargs["dtype"] == narrow:
            wide_kwargs["dtype"] = torch.float32
        out = op(*wide_args, **wide_kwargs)
        return tree_map(lambda t, d: t.to(d) if isinstance(t, torch.Tensor) and d is not None
                        and t.dtype != d else t, out, want)
    return run


# Priority 20: over every plain and chained import-time entry of these ops.
register_decomposition(OPS, scope=IMPORT, priority=20, overrides=True, chained=True)(_in_float32)
