"""Variance in the input's precision, not float64 (an fx pass, per target).

torch-mlir 20261001 decomposes ``var`` / ``var_mean`` / ``std`` /
``std_mean`` (what PyTorch's ``batch_norm`` decomposition calls in training)
by casting the input to float64, summing there and casting the result back:
a float32 model's graph then holds float64 tensors as large as its
activations. On the vulkan target (no or slow float64 on most devices) those
reductions do not compile: ResNet's first batch norm became
``reduction_32x1024_f64``, whose SPIR-V code needs 256 KiB of workgroup
memory against the device's 16 KiB ("uses 262144 bytes of shared memory;
exceeded the limit of 16384 bytes").

Here the same statistics are computed in two passes in float32 (float16 and
bfloat16 inputs in float32 too, as ATen accumulates them): ``mean =
sum(x) / n``, ``var = sum((x - mean)^2) / max(0, n - correction)``. Against
ATen's float64-accumulated Welford the relative error is a few float32 ulps
for the sizes of a batch norm (two-pass is what keeps it small: no
catastrophic cancellation of ``E[x^2] - E[x]^2``). float64 inputs (the user
asked for float64) are left to torch-mlir.

Applied by ``pipeline.stages.lower`` for the targets in
``targets.F32_STATISTICS_TARGETS``; the cpu target keeps torch-mlir's
float64 accumulation, which matches eager ATen's.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten

_NARROW = (torch.float32, torch.float16, torch.bfloat16)


def _dims(x, dim) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(x.dim(), 1) for d in dims})


def _stats(x, dim, correction, keepdim, take_sqrt=False):
    """(var or std, mean) of ``x`` over ``dim`` in float32, cast back to x's
    dtype; NotImplemented for float64, complex and integer inputs."""
    if x.dtype not in _NARROW:
        return NotImplemented
    dims = _dims(x, dim)
    n = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    c = 1.0 if correction is None else float(correction)
    xf = x if x.dtype == torch.float32 else aten._to_copy.default(x, dtype=torch.float32)
    if x.dim() == 0:
        mean = xf
        centred = aten.sub.Tensor(xf, mean)
        var = aten.div.Scalar(aten.mul.Tensor(centred, centred), max(0.0, n - c))
    else:
        mean = aten.div.Scalar(aten.sum.dim_IntList(xf, dims, True), float(n))
        centred = aten.sub.Tensor(xf, mean)
        var = aten.div.Scalar(aten.sum.dim_IntList(aten.mul.Tensor(centred, centred), dims,
                                                   keepdim), max(0.0, n - c))
        if not keepdim:
            mean = aten.squeeze.dims(mean, dims)
    if take_sqrt:
        var = aten.sqrt.default(var)
    if x.dtype != torch.float32:
        var = aten._to_copy.default(var, dtype=x.dtype)
        mean = aten._to_copy.default(mean, dtype=x.dtype)
    return var, mean


def var_mean_correction(x, dim=None, *, correction=None, keepdim=False):
    return _stats(x, dim, correction, keepdim)


def var_correction(x, dim=None, *, correction=None, keepdim=False):
    out = _stats(x, dim, correction, keepdim)
    return out if out is NotImplemented else out[0]


def std_correction(x, dim=None, *, correction=None, keepdim=False):
    out = _stats(x, dim, correction, keepdim, take_sqrt=True)
    return out if out is NotImplemented else out[0]


def std_mean_correction(x, dim=None, *, correction=None, keepdim=False):
    return _stats(x, dim, correction, keepdim, take_sqrt=True)


def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """Layer norm with its statistics in float32 on every target: eager's
    layer norm kernel computes them in float (``RowwiseMoments``), unlike
    ``var``, so torch's reference decomposition (through ``var_mean``, which
    torch-mlir upcasts) ran every LayerNorm of a cpu module in float64 at
    twice the bytes and half the vector lanes."""
    if input.dtype != torch.float32:
        return NotImplemented
    dims = list(range(input.dim() - len(normalized_shape), input.dim()))
    var, mean = _stats(input, dims, 0, True)
    rstd = aten.rsqrt.default(aten.add.Scalar(var, eps))
    out = aten.mul.Tensor(aten.sub.Tensor(input, mean), rstd)
    if weight is not None:
        out = aten.mul.Tensor(out, weight)
    if bias is not None:
        out = aten.add.Tensor(out, bias)
    return out, mean, rstd


LAYER_NORM = {aten.native_layer_norm.default: native_layer_norm}
"""For every target (``pipeline.stages.lower``): the cpu target keeps the
float64 ``var``/``std``/batch-norm statistics eager ATen accumulates in
double, but not layer norm's."""

DECOMPOSITIONS = {
    aten.var_mean.correction: var_mean_correction,
    aten.var.correction: var_correction,
    aten.std.correction: std_correction,
    aten.std_mean.correction: std_mean_correction,
}
"""op -> decomposition, for ``pipeline.fx_graph.decompose``'s ``extra``."""


def float64_free(gm) -> bool:
    """Whether no node of ``gm`` makes a float64 tensor (the check the
    targets without float64 statistics rely on; tests use it)."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else (val,)
        if any(isinstance(v, torch.Tensor) and v.dtype == torch.float64 for v in vals):
            return False
    return True
