"""PyTorch's FFT primitives as matrix products in real arithmetic.

``torch.fft`` dispatches to three aten ops (``_fft_r2c``, ``_fft_c2c``,
``_fft_c2r``) that neither torch-mlir nor IREE lowers, so FNet's token
mixing (``fftn(x, dim=(1, 2)).real``), spectral convolutions and filters ran
eagerly, each cutting its graph (and its backward, the same ops again).
Here each transformed dimension of size n is a product with the n x n
matrix of ``exp(-+2 pi i jk / n)`` on a complex value held as its real and
imaginary parts (``complex_as_real``'s pairs): O(n^2) per dimension, not
FFT's O(n log n), but one contraction the compiler tiles well, and exact to
float32 rounding for the sizes models use (sequence lengths, hidden sizes,
a few hundred). The angle's ``jk mod n`` is taken in int64 so no precision
is lost for large ``jk``. Normalization follows ``fft_norm_mode``:
0 none, 1 by 1/sqrt(n), 2 by 1/n over the product of the transformed sizes.
"""
from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _angles(rows: int, cols: int, n: int, like: torch.Tensor) -> torch.Tensor:
    """``2 pi (j k mod n) / n`` for j < rows, k < cols, in ``like``'s dtype."""
    j = aten.arange.default(rows, dtype=torch.int64, device=like.device)
    k = aten.arange.default(cols, dtype=torch.int64, device=like.device)
    jk = aten.remainder.Scalar(aten.mul.Tensor(j[:, None], k[None, :]), n)
    return aten.mul.Scalar(jk.to(like.dtype), 2 * math.pi / n)


def _along(x: torch.Tensor, dim: int, matrix: torch.Tensor) -> torch.Tensor:
    """``x`` contracted with ``matrix`` ([size of dim, new size]) along ``dim``."""
    moved = aten.movedim.int(x, dim, -1)
    return aten.movedim.int(aten.matmul.default(moved, matrix), -1, dim)


def _c2c_dim(re, im, dim: int, forward: bool, keep: int | None = None):
    """One dimension's DFT of ``re + i im`` (the first ``keep`` outputs)."""
    n = re.shape[dim]
    theta = _angles(n, n if keep is None else keep, n, re)
    c, s = aten.cos.default(theta), aten.sin.default(theta)
    if forward:  # exp(-i theta) = cos - i sin
        s = aten.neg.default(s)
    return (_along(re, dim, c) - _along(im, dim, s), _along(re, dim, s) + _along(im, dim, c))


def _normalized(parts, sizes, normalization: int):
    if normalization == 0:
        return parts
    n = math.prod(sizes)
    scale = 1.0 / (math.sqrt(n) if normalization == 1 else n)
    return tuple(aten.mul.Scalar(p, scale) for p in parts)


def c2c(re, im, dim, normalization: int, forward: bool):
    """``_fft_c2c``: the complex transform over ``dim``."""
    dims = [d % re.dim() for d in dim]
    for d in dims:
        re, im = _c2c_dim(re, im, d, forward)
    return _normalized((re, im), [re.shape[d] for d in dims], normalization)


def r2c(x, dim, normalization: int, onesided: bool):
    """``_fft_r2c``: the forward transform of a real ``x`` over ``dim``; the
    last dimension keeps n // 2 + 1 outputs when ``onesided``."""
    dims = [d % x.dim() for d in dim]
    sizes = [x.shape[d] for d in dims]
    last = dims[-1]
    keep = sizes[-1] // 2 + 1 if onesided else None
    re, im = _c2c_dim(x, aten.zeros_like.default(x), last, True, keep)
    for d in dims[:-1]:
        re, im = _c2c_dim(re, im, d, True)
    return _normalized((re, im), sizes, normalization)


def c2r(re, im, dim, normalization: int, last_dim_size: int):
    """``_fft_c2r``: the inverse transform to a real signal of
    ``last_dim_size`` along ``dim[-1]`` from its first n // 2 + 1 outputs
    (Hermitian symmetry gives the rest: the terms 0 < k < n/2 count twice;
    the imaginary parts of k = 0 and k = n/2 drop out, as pocketfft's)."""
    dims = [d % re.dim() for d in dim]
    for d in dims[:-1]:
        re, im = _c2c_dim(re, im, d, False)
    last, n = dims[-1], last_dim_size
    m = re.shape[last]
    theta = _angles(m, n, n, re)
    k = aten.arange.default(m, dtype=torch.int64, device=re.device)
    twice = aten.logical_and.default(aten.gt.Scalar(k, 0), aten.ne.Scalar(k * 2, n))
    weight = aten.add.Scalar(twice.to(re.dtype), 1.0)[:, None]
    out = (_along(re, last, aten.cos.default(theta) * weight)
           - _along(im, last, aten.sin.default(theta) * weight))
    sizes = [re.shape[d] for d in dims[:-1]] + [n]
    return _normalized((out,), sizes, normalization)[0]
