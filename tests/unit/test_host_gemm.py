"""``host_gemm``: the GEMM-based host calls (``host_blas``, ``host_attention``)
default to on only where PyTorch's GEMM is MKL on an Intel CPU; ``1``/``0``
override that on any machine and a typo is refused with the choices."""
from __future__ import annotations

import pytest

from lazy_mlir.host_calls import gemm as host_gemm
from lazy_mlir.host_calls.ops import attention as attention_host
from lazy_mlir.host_calls.runtime import blas as host_blas


@pytest.fixture
def vendor(monkeypatch):
    """Pretend the CPU is the given vendor's (``tuned_gemm`` asked afresh)."""
    def pretend(name):
        monkeypatch.setattr(host_gemm, "cpu_vendor", lambda: name)
        host_gemm.tuned_gemm.cache_clear()
    yield pretend
    host_gemm.tuned_gemm.cache_clear()


@pytest.mark.parametrize("enabled", [host_blas.enabled, attention_host.enabled])
def test_auto_follows_the_cpu_and_the_switch_overrides_it(enabled, vendor, monkeypatch):
    import torch
    for name in ("LAZY_MLIR_BLAS", "LAZY_MLIR_HOST_ATTENTION"):
        monkeypatch.delenv(name, raising=False)
    vendor("AuthenticAMD")
    assert not enabled()
    vendor("GenuineIntel")
    assert enabled() == torch.backends.mkl.is_available()
    for name in ("LAZY_MLIR_BLAS", "LAZY_MLIR_HOST_ATTENTION"):
        monkeypatch.setenv(name, "auto")
    assert enabled() == torch.backends.mkl.is_available()
    vendor(None)  # (no /proc/cpuinfo: IREE's own kernels)
    assert not enabled()
    for name in ("LAZY_MLIR_BLAS", "LAZY_MLIR_HOST_ATTENTION"):
        monkeypatch.setenv(name, " On ")
    assert enabled()
    vendor("GenuineIntel")
    for name in ("LAZY_MLIR_BLAS", "LAZY_MLIR_HOST_ATTENTION"):
        monkeypatch.setenv(name, "0")
    assert not enabled()


def test_a_typo_names_the_choices(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_BLAS", "yes please")
    with pytest.raises(ValueError, match=r"LAZY_MLIR_BLAS='yes please'.*1 \(on\), 0 \(off\) or auto"):
        host_blas.enabled()


def test_the_vendor_is_read_from_cpuinfo():
    import os
    vendor = host_gemm.cpu_vendor()
    if os.path.exists("/proc/cpuinfo"):
        assert vendor and vendor == vendor.strip()
    else:
        assert vendor is None
