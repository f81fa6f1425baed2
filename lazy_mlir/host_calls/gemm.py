"""Whether PyTorch's CPU GEMM beats IREE's on this machine: the default of the
host calls built on it.

Two kinds of host call run PyTorch kernels whose time is sgemm: ``host_blas``
(``torch.mm``/``bmm``) and ``host_attention`` (the CPU flash attention, whose
blocks are ``cpublas`` GEMMs). They were measured faster than IREE's own
kernels with MKL on Intel CPUs, where MKL runs its tuned kernels. MKL takes
a generic path on other vendors' CPUs. On an AMD EPYC (Zen 5), 2026-11-26:

- one matmul, one thread (``benchmarks/matmul_kernels.py``): ``torch.mm``
  108-117 GFLOP/s, IREE's ``mmt4d`` 209-236;
- a module with calls also runs on ``local-sync`` (``runtime/session.py``),
  so IREE's kernels lose their second worker: the medium GPT-2's plain step
  took 458-494 ms with the calls and 253-287 without (eager 450); ResNet's
  42-45 against 32 (eager 29); a 1024-4096-1024 MLP at batch 256 76 against 45.

So each switch (``LAZY_MLIR_BLAS``, ``LAZY_MLIR_HOST_ATTENTION``) is ``auto``
unless set: on where PyTorch's BLAS is MKL on an Intel CPU, off elsewhere;
``1`` turns it on and ``0`` off whatever the machine.
"""
from __future__ import annotations

import functools
import os

ON, OFF, AUTO = ("1", "true", "on", "yes"), ("0", "false", "off", "no"), "auto"
AUTO_MEANS = "on only for MKL on an Intel CPU"


def switch(name: str) -> bool:
    """The environment switch ``name`` of a GEMM-based host call: on, off or
    ``auto`` (``tuned_gemm``; the default)."""
    value = os.environ.get(name, AUTO).strip().lower()
    if value in ON:
        return True
    if value in OFF:
        return False
    if value == AUTO:
        return tuned_gemm()
    raise ValueError(f"lazy-mlir: {name}={os.environ[name]!r}: expected 1 (on), 0 (off) "
                     f"or auto ({AUTO_MEANS})")


@functools.lru_cache(maxsize=1)
def tuned_gemm() -> bool:
    """PyTorch's BLAS is MKL and the CPU is Intel's (MKL's tuned kernels)."""
    import torch
    return torch.backends.mkl.is_available() and cpu_vendor() == "GenuineIntel"


def cpu_vendor() -> str | None:
    """The CPU's ``vendor_id`` (Linux's ``/proc/cpuinfo``), None where unknown."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
