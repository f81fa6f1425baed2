"""Decompositions of our own for ops the torch dialect lacks and PyTorch has
no usable decomposition for (its refs call prims), applied at capture
(``lazy/decompose.py``).

Each writes the op in aten ops the dialect has, matching eager up to
rounding; each returns ``NotImplemented`` for the cases it does not cover,
which then fall back to eager.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def angle(x):
    """The argument of a real number: pi for negatives, 0 otherwise, NaN
    kept (ATen's ``angle_impl``); integers give the default float dtype."""
    if x.is_complex():
        return NotImplemented
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    xf = aten._to_copy.default(x, dtype=dtype)
    pi = torch.full((), math.pi, dtype=dtype, device=x.device)
    zero = torch.zeros((), dtype=dtype, device=x.device)
    out = aten.where.self(aten.lt.Scalar(xf, 0), pi, zero)
    return aten.where.self(aten.isnan.default(xf), xf, out)


def hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow: the larger magnitude
    times sqrt(1 + r^2), r the ratio (<= 1); an infinite side gives inf even
    with a NaN on the other, as C's hypot."""
    if not (a.is_floating_point() and b.is_floating_point()):
        return NotImplemented
    ax, ay = aten.abs.default(a), aten.abs.default(b)
    hi, lo = aten.maximum.default(ax, ay), aten.minimum.default(ax, ay)
    one = torch.ones((), dtype=hi.dtype, device=hi.device)
    r = aten.div.Tensor(lo, aten.where.self(aten.eq.Scalar(hi, 0), one, hi))
    out = aten.mul.Tensor(hi, aten.sqrt.default(aten.add.Tensor(aten.mul.Tensor(r, r), one)))
    # NaN explicitly: compiled maximum/minimum may drop a NaN operand.
    either_nan = aten.logical_or.default(aten.isnan.default(ax), aten.isnan.default(ay))
    out = aten.where.self(either_nan, aten.add.Tensor(ax, ay), out)
    inf = torch.full((), math.inf, dtype=hi.dtype, device=hi.device)
    either_inf = aten.logical_or.default(aten.isinf.default(ax), aten.isinf.default(ay))
    return aten.where.self(either_inf, inf, out)


def put(x, index, source, accumulate=False):
    """``x.flatten()[index] = source`` (or ``+=``) as an ``index_put`` on the
    flattened tensor."""
    flat = aten.reshape.default(x, [-1])
    index = aten.reshape.default(index, [-1])
    # Negative indices counted from the end here: the compiled index_put
    # does not wrap them (it writes out of bounds).
    index = aten.where.self(aten.lt.Scalar(index, 0), aten.add.Scalar(index, flat.numel()), index)
    out = aten.index_put.default(flat, [index], aten.reshape.default(source, [-1]), accumulate)
    return aten.reshape.default(out, list(x.shape))


def conj_physical(x):
    """The conjugate of a real tensor is a copy of it."""
    if x.is_complex():
        return NotImplemented
    return aten.clone.default(x)


# Random ops, written as the host-drawn fills eager itself makes (``normal_``,
# ``random_`` on an empty tensor, then arithmetic): the same generator
# stream as eager CPU, so ``torch.manual_seed`` gives the same numbers.
def _fill_normal(shape, dtype, device, std):
    return aten.normal_.default(torch.empty(shape, dtype=dtype, device=device), 0.0, std)


def normal_tensor_tensor(mean, std, *, generator=None):
    """ATen: ``out.normal_(0, 1); out.mul_(std).add_(mean)``."""
    if generator is not None:
        return NotImplemented
    shape = torch.broadcast_shapes(mean.shape, std.shape)
    dtype = torch.result_type(mean, std)
    return aten.add.Tensor(aten.mul.Tensor(_fill_normal(shape, dtype, mean.device, 1.0), std),
                           mean)


def normal_tensor_float(mean, std=1.0, *, generator=None):
    """ATen: ``out.normal_(0, std); out.add_(mean)``."""
    if generator is not None:
        return NotImplemented
    return aten.add.Tensor(_fill_normal(mean.shape, mean.dtype, mean.device, std), mean)


def normal_float_tensor(mean, std, *, generator=None):
    """ATen: ``out.normal_(0, 1); out.mul_(std).add_(mean)``."""
    if generator is not None:
        return NotImplemented
    return aten.add.Scalar(aten.mul.Tensor(_fill_normal(std.shape, std.dtype, std.device, 1.0),
                                           std), mean)


def randint_like(x, low, high=None, *, dtype=None, layout=None, device=None, pin_memory=None,
                 memory_format=None):
    """ATen: ``empty_like(x).random_(low, high)``, which draws as
    ``random_(high - low) + low`` (``random_.from`` is not used: fx cannot
    print an op named ``from``)."""
    if high is None:
        low, high = 0, low
    if not (isinstance(low, int) and isinstance(high, int)) or layout not in (None, torch.strided):
        return NotImplemented
    if max(abs(low), abs(high)) >= 2 ** 24:  # float results above 2**24 would round
        return NotImplemented
    out = torch.empty_like(x, dtype=dtype, memory_format=memory_format or torch.preserve_format)
    out = aten.random_.to(out, high - low)
    return aten.add.Scalar(out, low) if low else out


# Ops above whose decomposition may draw random numbers (see ``lazy/decompose.py``).
SAME_RANDOM_STREAM = {aten.normal.Tensor_Tensor, aten.normal.Tensor_float,
                      aten.normal.float_Tensor, aten.randint_like.default,
                      aten.randint_like.low_dtype}

from .bessel_decompositions import BESSEL_DECOMPOSITIONS  # noqa: E402
from .bessel_jy_decompositions import BESSEL_JY_DECOMPOSITIONS  # noqa: E402
from .special_gamma_decompositions import SPECIAL_DECOMPOSITIONS  # noqa: E402
from .linalg_lu_decompositions import LINALG_LU_DECOMPOSITIONS  # noqa: E402
from .sort_decompositions import SORT_DECOMPOSITIONS  # noqa: E402
from .scan_decompositions import SCAN_DECOMPOSITIONS  # noqa: E402
from .reduce_decompositions import REDUCE_DECOMPOSITIONS  # noqa: E402
from .precise_decompositions import PRECISE_DECOMPOSITIONS  # noqa: E402
from .resample_decompositions import RESAMPLE_DECOMPOSITIONS  # noqa: E402
from .grid_sample_decompositions import GRID_SAMPLE_DECOMPOSITIONS  # noqa: E402
from .linalg_det_decompositions import DET_DECOMPOSITIONS  # noqa: E402
from .pool_decompositions import POOL_DECOMPOSITIONS  # noqa: E402
from .linalg_cholesky_decompositions import CHOLESKY_DECOMPOSITIONS  # noqa: E402
from .linalg_qr_decompositions import QR_DECOMPOSITIONS  # noqa: E402
from .distance_decompositions import DISTANCE_DECOMPOSITIONS  # noqa: E402
from .histogram_decompositions import HISTOGRAM_DECOMPOSITIONS  # noqa: E402
from .mode_decompositions import MODE_DECOMPOSITIONS  # noqa: E402
from .embedding_bag_decompositions import EMBEDDING_BAG_DECOMPOSITIONS  # noqa: E402
from .segment_decompositions import SEGMENT_DECOMPOSITIONS  # noqa: E402

CAPTURE_DECOMPOSITIONS: dict = {
    **BESSEL_DECOMPOSITIONS,
    **BESSEL_JY_DECOMPOSITIONS,
    **SPECIAL_DECOMPOSITIONS,
    **LINALG_LU_DECOMPOSITIONS,
    **SORT_DECOMPOSITIONS,
    **SCAN_DECOMPOSITIONS,
    **REDUCE_DECOMPOSITIONS,
    **PRECISE_DECOMPOSITIONS,
    **RESAMPLE_DECOMPOSITIONS,
    **GRID_SAMPLE_DECOMPOSITIONS,
    **DET_DECOMPOSITIONS,
    **POOL_DECOMPOSITIONS,
    **CHOLESKY_DECOMPOSITIONS,
    **QR_DECOMPOSITIONS,
    **DISTANCE_DECOMPOSITIONS,
    **HISTOGRAM_DECOMPOSITIONS,
    **MODE_DECOMPOSITIONS,
    **EMBEDDING_BAG_DECOMPOSITIONS,
    **SEGMENT_DECOMPOSITIONS,
    aten.normal.Tensor_Tensor: normal_tensor_tensor,
    aten.normal.Tensor_float: normal_tensor_float,
    aten.normal.float_Tensor: normal_float_tensor,
    aten.randint_like.default: randint_like,
    aten.randint_like.low_dtype: randint_like,
    aten.angle.default: angle,
    aten.hypot.default: hypot,
    aten.put.default: put,
    aten._conj_physical.default: conj_physical,
    aten.conj_physical.default: conj_physical,
}
