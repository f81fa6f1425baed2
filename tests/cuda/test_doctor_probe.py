"""``lazy-mlir doctor``'s per-target probe: compiles (and, with a device,
runs and compares with the cpu target) a small graph on every target."""
from __future__ import annotations

import pytest

from lazy_mlir.tools.doctor import probe


def test_cpu_probe_runs_and_matches():
    assert probe("cpu", True) == ("ok", "compiled, ran, matches the cpu target")


def test_cuda_probe_compiles_without_a_gpu():
    status, detail = probe("cuda", False)
    assert status == "compiles", detail
    assert "no device" in detail


def test_vulkan_probe():
    from lazy_mlir.targets import driver_devices
    devices, why = driver_devices("vulkan")
    if not devices:
        pytest.skip(f"no Vulkan device: {why}")
    status, detail = probe("vulkan", True)
    assert status == "ok", detail


def test_a_failing_target_is_reported_not_raised():
    status, detail = probe("nonesuch", False)
    assert status == "fails" and "unknown target" in detail
