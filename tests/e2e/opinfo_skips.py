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

# Every other random op draws eager's numbers (PyTorch's CPU generator, in
# eager's order) and is compared by value: tests/e2e/test_random_stream.py.
_RANDOM = "random: the lazy device draws its dropout masks in the graph, not eager's"
_UNINIT = "uninitialized memory: the values are undefined"

SKIPS: dict[str, str] = {
    # Ops that are not tensor computations at all, or that need hardware this
    # machine does not have.
    "torch._scaled_mm": "float8 matmul, CUDA only",
    "torch._scaled_mm_v2": "float8 matmul, CUDA only",
    "torch.ops.aten._flash_attention_forward": "CUDA-only kernel",
    "torch.ops.aten._efficient_attention_forward": "CUDA-only kernel",
}

METADATA_ONLY: dict[str, str] = {
    "empty": _UNINIT,
    "empty_like": _UNINIT,
    "empty_strided": _UNINIT,
    "empty_permuted": _UNINIT,
    "new_empty": _UNINIT,
    "new_empty_strided": _UNINIT,
    "nn.functional.dropout": _RANDOM,
}
