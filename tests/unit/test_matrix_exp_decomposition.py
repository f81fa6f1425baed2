"""The Scalar-free scaling and squaring of ``ops/linalg_matrix_exp.py``,
run eagerly: the same values as ATen's ``matrix_exp`` (same degrees, same
squaring count, exact powers of two), NaN for non-finite norms."""
from __future__ import annotations

import torch

from lazy_mlir.ops.linalg_matrix_exp import linalg_matrix_exp


def test_matches_aten_over_degrees_and_squarings():
    g = torch.Generator().manual_seed(0)
    for scale in (1e-8, 1e-3, 0.05, 0.4, 1.2, 2.5, 30.0, 80.0):  # T1 .. T18, 0 .. 5 squarings
        a = torch.randn(5, 5, generator=g) * scale / 5
        # 1e-5: with 5 squarings (scale 80) the CPU's matmul summation order
        # shows: 3.5e-6 on a Sapphire Rapids core, where it was within 1e-6.
        torch.testing.assert_close(linalg_matrix_exp(a), torch.linalg.matrix_exp(a),
                                   rtol=1e-5, atol=1e-6)
    batch = torch.randn(4, 3, 3, generator=g) * 9
    torch.testing.assert_close(linalg_matrix_exp(batch), torch.linalg.matrix_exp(batch),
                               rtol=1e-6, atol=0)


def test_non_finite_norm_is_nan():
    a = torch.eye(3)
    a[1, 2] = float("inf")
    assert linalg_matrix_exp(a).isnan().all()
    assert linalg_matrix_exp(torch.full((2, 2), float("nan"))).isnan().all()
