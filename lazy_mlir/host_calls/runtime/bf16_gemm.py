"""The two bf16 GEMMs of ``host_calls.runtime.blas``: bf16 operands, a float32
result, as the module's ``linalg.matmul ins(bf16, bf16) outs(f32)`` computes it.

IREE 3.13 runs such a matmul at its float32 speed on the cpu target, where
PyTorch's oneDNN uses AMX or AVX512_BF16 (an Intel Xeon with AMX, 2 threads,
1024x512 @ 512x2048: IREE bf16 11.5 ms and float32 10.5; ``torch.mm`` of bf16
1.1-1.6 ms, of float32 10.5). Two ways, by what the module does with the result:

- ``rounded``: ``torch.matmul`` of the bf16 operands (oneDNN), its bf16 result
  widened: where every user of the float32 result rounds it to bf16
  (torch-mlir's ``aten.mm``/``bmm`` of bf16 tensors is a float32 accumulation
  and a ``truncf``), rounding first changes nothing, and the value is eager's
  bf16 ``mm``'s.
- ``exact``: a float32 result that is used as it is (autocast's ``addmm``, which
  PyTorch's decomposition computes in float32 from widened bf16 operands, adds
  the bias before rounding once, as eager's oneDNN ``addmm`` does): MKL's
  ``cblas_gemm_bf16bf16f32`` (exported by ``libtorch_cpu``) per matrix, which
  accumulates in float32 and returns it unrounded; ``torch.matmul`` of the
  widened operands where the symbol is missing.
"""
from __future__ import annotations

import ctypes
import functools
import os

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


@functools.lru_cache(maxsize=1)
def _cblas():
    """MKL's ``cblas_gemm_bf16bf16f32`` from PyTorch's own library, or None."""
    import torch
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    try:
        fn = ctypes.CDLL(path).cblas_gemm_bf16bf16f32
    except (OSError, AttributeError):
        return None
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    fn.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
    fn.restype = None
    return fn


def _layout(m) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a 2-d operand with one unit
    stride, as row-major cblas reads it; None for any other layout."""
    if m.stride(-1) == 1 and m.stride(-2) >= max(1, m.shape[-1]):
        return _NO_TRANS, m.stride(-2)
    if m.stride(-2) == 1 and m.stride(-1) >= max(1, m.shape[-2]):
        return _TRANS, m.stride(-1)
    return None


def rounded(a, b, out) -> None:
    """``out = a @ b`` computed in bf16 (rounded once), widened to float32."""
    import torch
    out.copy_(torch.matmul(a, b))


def exact(a, b, out) -> None:
    """``out = a @ b`` accumulated in float32 and not rounded: a 2-d or a
    batched (3-d) product of bf16 operands into a contiguous float32 ``out``."""
    fn = _cblas()
    pairs = [(a, b, out)] if a.dim() == 2 else list(zip(a, b, out))
    layouts = [(_layout(x), _layout(y)) for x, y, _ in pairs]
    if fn is None or any(la is None or lb is None for la, lb in layouts):
        import torch
        torch.matmul(a.float(), b.float(), out=out)
        return
    for (x, y, z), ((ta, lda), (tb, ldb)) in zip(pairs, layouts):
        m, k = x.shape
        fn(_ROW_MAJOR, ta, tb, m, y.shape[1], k, 1.0, x.data_ptr(), lda,
           y.data_ptr(), ldb, 0.0, z.data_ptr(), z.stride(0))
