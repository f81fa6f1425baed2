"""The cuda target: compiling needs no GPU; running is skipped without one.

IREE's CUDA backend embeds PTX in the module (no ``ptxas`` by default), so
the requested SM is visible in the artifact as PTX's ``.target sm_XY``.
"""
from __future__ import annotations

import re

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.pipeline.stages import compile_stages
from lazy_mlir.targets import get_target


def _mlp(x, w, b):
    return torch.relu(x @ w + b).sum(1)


ARGS = (torch.randn(4, 8), torch.randn(8, 16), torch.randn(16))


@pytest.fixture(scope="module")
def lowered():
    return lm.jit(_mlp).lower(*ARGS)


def _ptx_targets(vmfb: bytes) -> set[str]:
    return {m.decode() for m in re.findall(rb"\.target\s+(sm_\d+a?)", vmfb)}


@pytest.mark.parametrize("name, sm", [("cuda:sm_80", "sm_80"), ("cuda:sm_86", "sm_86")])
def test_compiles_ptx_for_the_requested_sm(lowered, name, sm):
    target = get_target(name)
    compiled = compile_stages((lowered.stage("linalg"),), target, lowered.config)
    assert f"--iree-cuda-target={sm}" in compiled.flags
    assert _ptx_targets(compiled.vmfb) == {sm}
    assert b".version" in compiled.vmfb  # PTX text, not a cubin


def test_env_sm_reaches_the_artifact(lowered, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_CUDA_SM", "7.5")
    target = get_target("cuda")
    compiled = compile_stages((lowered.stage("linalg"),), target, lowered.config)
    assert _ptx_targets(compiled.vmfb) == {"sm_75"}


def test_float64_is_kept(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_CUDA_SM", "sm_80")
    low = lm.jit(lambda a: a * 2 + 1).lower(torch.randn(5, dtype=torch.float64))
    vmfb = compile_stages((low.stage("linalg"),), get_target("cuda"), low.config).vmfb
    assert re.search(rb"\.f64", vmfb)


def _cuda_session():
    from lazy_mlir.runtime.session import DeviceUnavailableError, session_for
    try:
        return session_for(get_target("cuda")), ""
    except DeviceUnavailableError as e:
        return None, str(e)


def test_without_a_gpu_the_session_error_is_clear():
    session, why = _cuda_session()
    if session is not None:
        pytest.skip("a CUDA device is present")
    assert "'cuda'" in why and "drivers found" in why
    lm.mark_step()
    lm.wait_device_ops()
    before = lm.metrics.counter_value("UncachedCompile")
    from lazy_mlir.runtime.session import DeviceUnavailableError
    lm.set_target("cuda")
    try:
        a = torch.randn(3, 3)
        x = a.to("lazy") * 7 - 1
        with pytest.raises(DeviceUnavailableError, match="drivers found"):
            x.cpu()
        # The module was compiled: only running it needed the device.
        assert lm.metrics.counter_value("UncachedCompile") == before + 1
    finally:
        lm.set_target("cpu")
    torch.testing.assert_close(x.cpu(), a * 7 - 1)  # still computable on the cpu target


def test_runs_on_a_cuda_device():
    session, why = _cuda_session()
    if session is None:
        pytest.skip(f"no CUDA device: {why.splitlines()[0]}")
    lm.mark_step()
    lm.wait_device_ops()
    expected = _mlp(*ARGS)
    lm.set_target("cuda")
    try:
        got = _mlp(*[a.to("lazy") for a in ARGS]).cpu()
    finally:
        lm.mark_step()
        lm.wait_device_ops()
        lm.set_target("cpu")
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
