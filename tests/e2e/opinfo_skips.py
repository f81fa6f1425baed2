"""Ops of PyTorch's ``op_db`` that the OpInfo sweep does not compare.

``SKIPS`` (op name -> reason): not run at all, neither by
``benchmarks/op_coverage.py`` (they are reported as ``skipped``) nor by
``tests/e2e/test_opinfo.py``. Op names are ``OpInfo.name`` with
``.variant_test_name`` appended when there is one (``normal.number_mean``).

``METADATA_ONLY`` (op name -> reason): run, but only the shape and dtype of
their results are compared, because their values are random or undefined.

Ops whose samples need data-dependent output shapes (``nonzero``,
``masked_select``, ...) are *not* skipped: the sweep reports what the lazy
device does with them (a fallback, or an error).
"""
from __future__ import annotations

_RANDOM = "random: values come from a generator; the same seed need not give the same stream"
_UNINIT = "uninitialized memory: the values are undefined"

SKIPS: dict[str, str] = {
    # Ops that are not tensor computations at all, or that need hardware this
    # machine does not have.
    "torch._scaled_mm": "float8 matmul, CUDA only",
    "torch._scaled_mm_v2": "float8 matmul, CUDA only",
    "torch.ops.aten._flash_attention_forward": "CUDA-only kernel",
    "torch.ops.aten._efficient_attention_forward": "CUDA-only kernel",
    # Random ops whose eager result depends on how many numbers the kernel
    # draws and in which order; they are run for metadata instead below when
    # that is meaningful, and skipped when even that cannot be checked.
    "multinomial": _RANDOM + " (samples without replacement depend on the draw order)",
    "nn.functional.rrelu": _RANDOM + " (training mode draws inside the kernel)",
}

METADATA_ONLY: dict[str, str] = {
    "empty": _UNINIT,
    "empty_like": _UNINIT,
    "empty_strided": _UNINIT,
    "empty_permuted": _UNINIT,
    "new_empty": _UNINIT,
    "new_empty_strided": _UNINIT,
    "bernoulli": _RANDOM,
    "cauchy": _RANDOM,
    "exponential": _RANDOM,
    "geometric": _RANDOM,
    "log_normal": _RANDOM,
    "normal": _RANDOM,
    "normal.in_place": _RANDOM,
    "normal.number_mean": _RANDOM,
    "uniform": _RANDOM,
    "rand_like": _RANDOM,
    "randn": _RANDOM,
    "randn_like": _RANDOM,
    "randint": _RANDOM,
    "randint_like": _RANDOM,
    "nn.functional.dropout": _RANDOM + " (the lazy device draws its dropout mask in the graph)",
    "nn.functional.dropout2d": _RANDOM,
    "nn.functional.dropout3d": _RANDOM,
    "nn.functional.alpha_dropout": _RANDOM,
    "nn.functional.feature_alpha_dropout.with_train": _RANDOM,
}
