"""The targets table and the error for a target whose driver is missing.

No compiler needed: resolving a target only reads the environment and asks
the IREE runtime which devices it has.
"""
from __future__ import annotations

import pytest

from lazy_mlir import targets as T
from lazy_mlir.targets import TARGETS, Target, get_target


def test_table_has_the_three_targets():
    assert list(TARGETS) == ["cpu", "vulkan", "cuda"]
    cpu, vulkan, cuda = (TARGETS[n] for n in ("cpu", "vulkan", "cuda"))
    assert (cpu.backend, cpu.driver) == ("llvm-cpu", "local-task")
    assert "--iree-llvmcpu-target-cpu=host" in cpu.flags
    assert "--iree-input-demote-f64-to-f32=false" in cpu.flags
    # data tiling with microkernels for matmuls, not convolutions; not for the GPUs
    for flag in T.CPU_DATA_TILING:
        assert flag in cpu.flags and flag in cpu.optional_flags
    assert not any("set-data-tiling-ops" in f for f in cpu.flags)
    assert not any("data-tiling" in f or "ukernels" in f for f in vulkan.flags + cuda.flags)
    assert (vulkan.backend, vulkan.driver) == ("vulkan-spirv", "vulkan")
    assert any(f.startswith("--iree-vulkan-target=") for f in vulkan.flags)
    assert (cuda.backend, cuda.driver) == ("cuda", "cuda")
    assert any(f.startswith("--iree-cuda-target=sm_") for f in cuda.flags)


def test_default_and_unknown(monkeypatch):
    monkeypatch.delenv("LAZY_MLIR_TARGET", raising=False)
    assert get_target() == get_target("cpu") == T.CPU
    monkeypatch.setenv("LAZY_MLIR_TARGET", "cuda")
    assert get_target().name == "cuda"
    with pytest.raises(ValueError, match="unknown target 'tpu'.*cpu, cuda, vulkan"):
        get_target("tpu")
    with pytest.raises(ValueError, match="takes no architecture"):
        get_target("cpu:znver4")


def test_cache_key_includes_the_flags():
    a = Target("x", "llvm-cpu", "local-task", ("--a",))
    b = Target("x", "llvm-cpu", "local-task", ("--b",))
    assert a.cache_key != b.cache_key
    assert "--a" in a.cache_key
    assert get_target("cuda:sm_80").cache_key != get_target("cuda:sm_86").cache_key
    assert get_target("vulkan:rdna3").cache_key != get_target("vulkan:valhall").cache_key


def test_cuda_sm_override_and_default(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_CUDA_SM", "8.6")
    assert get_target("cuda").flags[0] == "--iree-cuda-target=sm_86"
    monkeypatch.setenv("LAZY_MLIR_CUDA_SM", "sm_75")
    assert get_target("cuda").flags[0] == "--iree-cuda-target=sm_75"
    assert get_target("cuda:89").flags[0] == "--iree-cuda-target=sm_89"  # the name wins
    monkeypatch.setenv("LAZY_MLIR_CUDA_SM", "ampere")
    with pytest.raises(ValueError, match="not a CUDA SM"):
        get_target("cuda")
    monkeypatch.delenv("LAZY_MLIR_CUDA_SM")
    monkeypatch.setattr(T, "cuda_device_sms", lambda: ())
    assert get_target("cuda").flags[0] == "--iree-cuda-target=sm_80"
    monkeypatch.setattr(T, "cuda_device_sms", lambda: (86,))
    assert get_target("cuda").flags[0] == "--iree-cuda-target=sm_86"
    # An SM iree-compile does not describe: the newest one below it (PTX runs on newer).
    monkeypatch.setattr(T, "cuda_device_sms", lambda: (90,))
    assert get_target("cuda").flags[0] == "--iree-cuda-target=sm_89"


def test_vulkan_override(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_VULKAN_TARGET", "rdna3")
    t = get_target("vulkan")
    assert t.flags == ("--iree-vulkan-target=rdna3", T.VULKAN_I64_DEMOTION, T.VULKAN_CONV_LAYOUT)
    assert "LAZY_MLIR_VULKAN_TARGET" in t.device
    assert get_target("vulkan:valhall").flags[0] == "--iree-vulkan-target=valhall"
    monkeypatch.setenv("LAZY_MLIR_VULKAN_FEATURES", "spirv:v1.3,cap:Shader")
    assert get_target("vulkan").flags == ("--iree-vulkan-target=rdna3",
                                          "--iree-vulkan-target-features=spirv:v1.3,cap:Shader",
                                          T.VULKAN_I64_DEMOTION, T.VULKAN_CONV_LAYOUT)


def test_vulkan_detection(monkeypatch):
    monkeypatch.delenv("LAZY_MLIR_VULKAN_TARGET", raising=False)
    monkeypatch.delenv("LAZY_MLIR_VULKAN_FEATURES", raising=False)

    def detect(devices):
        # The patch is undone before the cache is cleared: no answer made up
        # here is left for the worker's later tests (tests/vulkan compile by it).
        T._detected_vulkan.cache_clear()
        try:
            with monkeypatch.context() as m:
                m.setattr(T, "driver_devices", lambda d: devices)
                return get_target("vulkan")
        finally:
            T._detected_vulkan.cache_clear()

    none = detect(((), "no driver"))
    assert none.flags == (f"--iree-vulkan-target={T.VULKAN_BASELINE}", T.VULKAN_I64_DEMOTION,
                          T.VULKAN_CONV_LAYOUT)
    assert "no Vulkan device" in none.device
    lvp = detect((({"name": "llvmpipe (LLVM 15.0.6, 256 bits)"},), ""))
    assert lvp.flags[0] == f"--iree-vulkan-target={T.VULKAN_BASELINE}"
    assert "cap:StorageBuffer8BitAccess" in lvp.flags[1]
    assert "--iree-input-demote-f64-to-f32=false" in lvp.flags
    monkeypatch.setattr(T, "_checked_vulkan_target", lambda arch: True)
    amd = detect((({"name": "AMD Radeon RX 7900 XTX (RADV NAVI31)"},), ""))
    assert amd.flags[:-2] == ("--iree-vulkan-target=rdna3",)
    monkeypatch.setattr(T, "_checked_vulkan_target", lambda arch: False)
    amd = detect((({"name": "AMD Radeon RX 7900 XTX (RADV NAVI31)"},), ""))
    assert amd.flags[:-2] == (f"--iree-vulkan-target={T.VULKAN_BASELINE}",)


@pytest.mark.parametrize("name, sm, arch", [
    ("AMD Radeon RX 7900 XTX (RADV NAVI31)", None, "rdna3"),
    ("AMD Radeon RX 6800 XT (RADV NAVI21)", None, "rdna2"),
    ("AMD Radeon Graphics (RADV REMBRANDT)", None, "rdna2"),
    ("NVIDIA GeForce RTX 3080 Ti", None, "rtx3080ti"),
    ("NVIDIA A100-SXM4-80GB", None, "a100"),
    ("NVIDIA GeForce RTX 4090", 89, "ampere"),
    ("NVIDIA GeForce GTX 1080", 61, "pascal"),
    ("NVIDIA GeForce GTX 1080", None, None),
    ("Mali-G715", None, "mali-g715"),
    ("Adreno (TM) 740", None, "adreno-740"),
    ("llvmpipe (LLVM 15.0.6, 256 bits)", None, None),
    ("SwiftShader Device (Subzero)", None, None),
    ("Intel(R) UHD Graphics 630 (CFL GT2)", None, None),
])
def test_vulkan_target_for(name, sm, arch):
    assert T.vulkan_target_for(name, sm) == arch


def test_parse_sm():
    assert T.parse_sm("sm_80") == T.parse_sm("80") == T.parse_sm("8.0") == 80
    assert T.parse_sm("sm_120") == 120 and T.parse_sm("12.0") == 120
    with pytest.raises(ValueError):
        T.parse_sm("sm_x")


def test_missing_driver_is_reported_at_session_creation():
    import iree.runtime as rt
    from lazy_mlir.runtime.session import DeviceUnavailableError, Session
    fake = Target("fake", "llvm-cpu", "no-such-driver", ())
    with pytest.raises(DeviceUnavailableError) as e:
        Session(fake)
    msg = str(e.value)
    assert "'fake'" in msg and "'no-such-driver'" in msg
    for name in rt.query_available_drivers():
        assert name in msg  # lists the drivers found
    assert "lazy-mlir doctor" in msg


def test_driver_that_cannot_create_a_device(monkeypatch):
    """A driver the runtime has but that fails (CUDA without libcuda, or a
    monkeypatched failure): the error says why and lists what is usable."""
    import iree.runtime as rt
    from lazy_mlir.runtime import session
    from lazy_mlir.runtime.session import DeviceUnavailableError, Session
    assert "local-sync" in rt.query_available_drivers()
    # (a test run before on this worker may have made the process's
    # local-sync device, the calls device: this one must make its own)
    monkeypatch.setattr(session, "_devices", {})

    class Broken:
        def create_default_device(self):
            raise RuntimeError("UNAVAILABLE; no device in this test")

    real = rt.get_driver
    monkeypatch.setattr(rt, "get_driver", lambda n: Broken() if n == "local-sync" else real(n))
    T.driver_devices.cache_clear()
    try:
        with pytest.raises(DeviceUnavailableError) as e:
            Session(Target("sync", "llvm-cpu", "local-sync", ()))
    finally:
        T.driver_devices.cache_clear()  # forget the broken driver's answer
    msg = str(e.value)
    assert "cannot create a device" in msg and "no device in this test" in msg
    assert "drivers found:" in msg and "local-task (1 device)" in msg


def test_cuda_session_without_gpu():
    """On a machine without CUDA the cuda target resolves (compile only) and
    its session fails with the clear error, not at import or compile time."""
    from lazy_mlir.targets import cuda_device_sms
    from lazy_mlir.runtime.session import DeviceUnavailableError, Session
    if cuda_device_sms():
        pytest.skip("a CUDA device is present")
    target = get_target("cuda")
    with pytest.raises(DeviceUnavailableError, match="(?s)'cuda'.*drivers found"):
        Session(target)


def test_cpu_threads(monkeypatch):
    from lazy_mlir.targets import cpu_threads
    monkeypatch.setenv("LAZY_MLIR_CPU_THREADS", "3")
    assert cpu_threads() == 3
    monkeypatch.setenv("LAZY_MLIR_CPU_THREADS", "0")
    with pytest.raises(ValueError, match="LAZY_MLIR_CPU_THREADS"):
        cpu_threads()
    monkeypatch.delenv("LAZY_MLIR_CPU_THREADS")
    assert cpu_threads() >= 1


def test_no_device_answers_are_asked_again(monkeypatch):
    """A driver that found no device once is asked again: that answer is not
    kept for the process (issue 29: a cached "no Vulkan device" compiled every
    later graph without lavapipe's narrow storage, and answered wrongly)."""
    calls = []
    answers = iter([((), "failed once"), (({"name": "llvmpipe (LLVM 15)"},), "")])

    def detect_once(_driver):
        calls.append(_driver)
        return next(answers)

    monkeypatch.delenv("LAZY_MLIR_VULKAN_TARGET", raising=False)
    monkeypatch.delenv("LAZY_MLIR_VULKAN_FEATURES", raising=False)
    T._detected_vulkan.cache_clear()
    try:
        with monkeypatch.context() as m:
            m.setattr(T, "driver_devices", detect_once)
            assert "no Vulkan device" in get_target("vulkan").device
            found = get_target("vulkan")
            assert found.device.startswith("llvmpipe") and "cap:Int8" in found.flags[1]
            assert get_target("vulkan") == found and len(calls) == 2  # kept once found
    finally:
        T._detected_vulkan.cache_clear()

    seen = []

    @T._kept_when(lambda answer: bool(answer[0]))
    def query(driver):
        seen.append(driver)
        return ((), "none") if len(seen) == 1 else (({"name": "d"},), "")
    assert query("x") == ((), "none") and query("x")[0] and query("x")[0]
    assert seen == ["x", "x"]


def test_cpu_driver_from_the_environment(monkeypatch):
    """``LAZY_MLIR_CPU_DRIVER`` picks the cpu target's runtime driver; the
    compiled module is the same for both (one cache key), a typo says what to
    write instead."""
    monkeypatch.delenv("LAZY_MLIR_CPU_DRIVER", raising=False)
    assert get_target("cpu").driver == "local-task"
    monkeypatch.setenv("LAZY_MLIR_CPU_DRIVER", "Local-Sync")
    sync = get_target("cpu")
    assert sync.driver == "local-sync"
    assert sync.cache_key == T.CPU.cache_key and sync.flags == T.CPU.flags
    monkeypatch.setenv("LAZY_MLIR_CPU_DRIVER", "local-thread")
    with pytest.raises(ValueError, match="local-task, local-sync"):
        get_target("cpu")
