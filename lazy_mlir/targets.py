"""Targets: IREE compile flags and the runtime driver of each device type.

A ``Target`` is what a compiled module depends on besides the graph: the IREE
backend, the flags that pick the instruction set, and the runtime driver that
runs it. ``get_target(name)`` resolves a name to one:

========  ============  ==========  ==============================================
name      backend       driver      flags
========  ============  ==========  ==============================================
cpu       llvm-cpu      local-task  ``--iree-llvmcpu-target-cpu=host``; data
                                    tiling with microkernels for matmuls
                                    (``CPU_DATA_TILING``); float64 kept (not
                                    demoted to float32)
vulkan    vulkan-spirv  vulkan      ``--iree-vulkan-target=T``: T from
                                    ``LAZY_MLIR_VULKAN_TARGET``, else the first
                                    Vulkan device's architecture, else
                                    ``vp_android_baseline_2022`` (any device);
                                    on llvmpipe (lavapipe) the baseline plus
                                    the device's features (``LLVMPIPE_FEATURES``;
                                    ``LAZY_MLIR_VULKAN_FEATURES`` overrides)
cuda      cuda          cuda        ``--iree-cuda-target=sm_XY``: from
                                    ``LAZY_MLIR_CUDA_SM``, else the first CUDA
                                    device, else ``sm_80``; float64 kept
========  ============  ==========  ==============================================

A name may carry the architecture after a colon, which wins over the
environment: ``vulkan:rdna3``, ``cuda:sm_86`` (also ``cuda:86`` / ``cuda:8.6``).

Guarantees:

- Resolving a target never needs its runtime driver: ``get_target("cuda")``
  works (and compiles) on a machine without a GPU. A missing driver is
  reported when a ``runtime.session.Session`` is created for the target.
- ``cache_key`` includes every flag, so modules built for different devices
  never share a cache entry.
- Devices are queried once per process (until one is found); the environment
  is read on every call.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("lazy_mlir")


@dataclass(frozen=True)
class Target:
    """A compile target: everything but the graph that shapes a module."""

    name: str
    backend: str          # --iree-hal-target-backends
    driver: str           # iree.runtime driver
    flags: tuple[str, ...]
    device: str = ""      # what the flags were chosen for (a device name, or why)
    # Flags that only make code faster: a module iree-compile fails to build
    # with them is compiled again without them (stages.compile_stages).
    optional_flags: tuple[str, ...] = ()
    # Flags kept only for graphs whose largest matmul has at least
    # LARGE_MATMUL_MACS multiply-adds (stages.iree_flags).
    large_matmul_flags: tuple[str, ...] = ()

    @property
    def cache_key(self) -> str:
        return f"{self.name}:{self.backend}:{' '.join(self.flags)}"


# -- cpu -------------------------------------------------------------------

CPU_DATA_TILING = (
    "--iree-opt-data-tiling",
    "--iree-llvmcpu-enable-ukernels=all",
)
"""Matmuls in packed (tiled) layouts, run by IREE's microkernels: ~200 GFLOP/s
on a 2048^3 matmul against 47 with IREE's default CPU code; the MLP training
step (benchmarks/train_step.py) ran 1.25x faster. Optional: IREE's tiling can
fail on some shapes ("One or more operations with large vector sizes (32768
bytes) were found", seen with its encoding-fusion options), and a graph then
compiles again without them.

Convolutions are NOT data-tiled (``CONV_DATA_TILING``): on IREE 3.13 that made
the MNIST CNN step 3.4x faster but computes a convolution of a spatially
transposed square input wrongly (``x.transpose(2, 3)`` of a 5x5 image;
tests/e2e/test_pipeline.py keeps the case).

Only for graphs with a large matmul (``LARGE_MATMUL_MACS``)."""

LARGE_MATMUL_MACS = 1 << 26
"""Smallest largest-matmul (multiply-adds) of a graph that the cpu target
data-tiles. Packing costs a copy of every matmul operand; small matmuls, or
ones with a narrow side padded to 16, lose more than the microkernels win.
Steady-state step modules (``iree-benchmark-module``, 2 threads, medians of
3; data-tiled / plain, ms):

- LeNet-5 b1 (largest matmul 0.05 M): 0.36 / 0.30, 0.46 / 0.34;
  b64 (30 M): 6.8 / 5.5, 8.9 / 7.0; b256 (121 M): 33 / 37, 37 / 31
- MLP 784-1024-1024-10 b1 (1 M): 4.1 / 3.4, 4.2 / 3.0; b32 (34 M): 5.4 / 4.8,
  4.9 / 4.7; b64 (67 M): 6.9 / 8.2; b128 (134 M): 10.4 / 12.2, 10.0 / 11.4
- MNIST CNN b8 (101 M): 9.8 / 9.6, 9.6 / 10.6; b64 (798 M): 57 / 80, 67 / 80

In the training loop (``compile_train_step``, paired processes) LeNet b64
ran 0.84x; LeNet b1, whose step is mostly host work and dispatch wake-ups,
about 0.04 ms (5%) slower in 9 of 12 pairs: no rule on size alone wins there.
"""

CONV_DATA_TILING = (
    "--iree-dispatch-creation-experimental-set-data-tiling-ops=matmul",
    "--iree-dispatch-creation-experimental-set-data-tiling-ops=convolution",
)
"""Data tiling for convolutions too: add to ``[iree_flags] cpu`` of a pipeline
configuration only for models without transposed conv inputs (see above)."""


@functools.lru_cache(maxsize=None)
def host_cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags (``/proc/cpuinfo``; empty where it cannot
    be read): the cpu target compiles for the host, and passes that tune for
    its vectors read them here."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() in ("flags", "Features"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


CPU = Target("cpu", "llvm-cpu", "local-task", (
    "--iree-llvmcpu-target-cpu=host",
    *CPU_DATA_TILING,
    # Keep float64 as float64: IREE demotes it to f32 by default.
    "--iree-input-demote-f64-to-f32=false",
), device="host CPU", optional_flags=CPU_DATA_TILING, large_matmul_flags=CPU_DATA_TILING)


# -- vulkan ----------------------------------------------------------------

VULKAN_BASELINE = "vp_android_baseline_2022"
"""IREE's default Vulkan target: 32-bit compute and storage, no subgroup ops,
128 invocations per workgroup. Every conformant device runs it (int64 is
emulated, float64 demoted to float32), including Mesa's lavapipe/llvmpipe and
SwiftShader, which run on the CPU."""

# RADV reports the chip after the product name: "AMD Radeon RX 7900 XTX (RADV NAVI31)".
_AMD_CODENAMES = [
    (r"NAVI3\d|GFX11\d\d|PHOENIX|STRIX", "rdna3"),
    (r"NAVI2\d|GFX103\d|VANGOGH|REMBRANDT|RAPHAEL|MENDOCINO|DIMGREY|BEIGE|YELLOW", "rdna2"),
    (r"NAVI1\d|GFX101\d", "rdna1"),
]
_NVIDIA_PRODUCTS = {"3090 ti": "rtx3090ti", "3090": "rtx3090", "3080 ti": "rtx3080ti",
                    "3080": "rtx3080", "3070 ti": "rtx3070ti", "3070": "rtx3070"}


def vulkan_target_for(device_name: str, cuda_sm: int | None = None) -> str | None:
    """The ``--iree-vulkan-target`` naming the device called ``device_name``
    (as the Vulkan driver reports it), or None when IREE has no description
    of it (then ``VULKAN_BASELINE`` is the safe choice). ``cuda_sm`` (e.g. 86)
    helps with NVIDIA devices whose product IREE does not list."""
    name = device_name.strip()
    low = name.lower()
    if any(s in low for s in ("llvmpipe", "lavapipe", "swiftshader")):
        return None  # CPU implementations: IREE's GPU descriptions do not fit
    if "amd" in low or "radeon" in low or "radv" in low:
        for pattern, arch in _AMD_CODENAMES:
            if re.search(pattern, name, re.IGNORECASE):
                return arch
        m = re.search(r"RX\s*(7[6-9]00)\s*(XTX|XT|GRE)?", name, re.IGNORECASE)
        if m:
            return "rdna3"
        m = re.search(r"RX\s*6[4-9]\d0", name, re.IGNORECASE)
        return "rdna2" if m else None
    if "nvidia" in low or "geforce" in low or "quadro" in low or "tesla" in low:
        if re.search(r"\bA100\b", name):
            return "a100"
        m = re.search(r"RTX\s*(30[789]0)(\s*Ti)?", name, re.IGNORECASE)
        if m:
            key = m.group(1) + (" ti" if m.group(2) else "")
            return _NVIDIA_PRODUCTS.get(key)
        if cuda_sm is not None:
            if cuda_sm >= 80:
                return "ampere"
            if cuda_sm >= 75:
                return "turing"
            if cuda_sm >= 70:
                return "volta"
            if cuda_sm >= 60:
                return "pascal"
        return None
    m = re.search(r"Mali-?\s*(G\d{2,3})", name, re.IGNORECASE)
    if m:
        return "mali-" + m.group(1).lower()
    m = re.search(r"Adreno\D*(\d{3})", name, re.IGNORECASE)
    if m:
        return "adreno-" + m.group(1)
    return None


def _kept_when(found):
    """A per-process cache, like ``functools.lru_cache``, that keeps only the
    answers ``found`` accepts. A "no device" answer (a driver that failed to
    start once, a test's patched query) is asked again next time: kept, it
    picked a process's Vulkan flags for good, without lavapipe's 8/16-bit
    storage (issue 29's wrong bool and bfloat16 results)."""
    def wrap(fn):
        memo: dict = {}

        @functools.wraps(fn)
        def cached(*args):
            if args in memo:
                return memo[args]
            out = fn(*args)
            if found(out):
                memo.setdefault(args, out)
            return out
        cached.cache_clear = memo.clear
        return cached
    return wrap


@_kept_when(lambda answer: bool(answer[0]))
def driver_devices(driver: str) -> tuple[tuple[dict, ...], str]:
    """(devices, error) of an IREE runtime driver: its devices as
    ``query_available_devices`` lists them, or () and why not. Cached per
    process once a device is found. Creates the driver: ``local-task`` gets
    its worker count set first (it starts its workers when created)."""
    try:
        import iree.runtime as rt
        if driver not in rt.query_available_drivers():
            return (), f"this iree-base-runtime has no {driver!r} driver"
        if driver == "local-task":
            configure_cpu_threads()
        return tuple(rt.get_driver(driver).query_available_devices()), ""
    except Exception as e:  # a driver whose library is missing raises here
        return (), " ".join(str(e).split())


@functools.lru_cache(maxsize=None)
def _checked_vulkan_target(arch: str) -> bool:
    """Whether iree-compile knows ``arch`` (a trial compile, once per arch)."""
    import iree.compiler as ic
    src = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}")
    try:
        ic.compile_str(src, target_backends=["vulkan-spirv"],
                       extra_args=[f"--iree-vulkan-target={arch}"])
        return True
    except Exception:
        log.warning("lazy-mlir: iree-compile does not know the Vulkan target %r; using %s",
                    arch, VULKAN_BASELINE)
        return False


LLVMPIPE_FEATURES = ",".join([
    "spirv:v1.3", "cap:Shader", "cap:Float64", "cap:Float16", "cap:Int64", "cap:Int16",
    "cap:Int8", "cap:StorageBuffer16BitAccess", "cap:StorageUniform16",
    "cap:StoragePushConstant16", "cap:StorageBuffer8BitAccess",
    "cap:UniformAndStorageBuffer8BitAccess", "cap:StoragePushConstant8",
    "ext:SPV_KHR_16bit_storage", "ext:SPV_KHR_8bit_storage"])
"""What Mesa's llvmpipe (lavapipe) supports beyond the baseline profile:
64-bit and 16-bit arithmetic, 8- and 16-bit storage buffers. The 8/16-bit
storage matters: without it IREE packs bool/int8/bf16 tensors into 32-bit
words, and llvmpipe, which always bounds-checks storage buffers, drops the
last word of a buffer whose size is not a multiple of 4 bytes. No subgroup
operations: llvmpipe's subgroups have 8 lanes, a size no IREE target
description has, and reductions assuming another size are wrong."""


@_kept_when(lambda answer: not answer[1].startswith("no Vulkan device"))
def _detected_vulkan() -> tuple[tuple[str, ...], str]:
    """(flags, device description) for the first Vulkan device."""
    devices, err = driver_devices("vulkan")
    if not devices:
        why = f"no Vulkan device ({err})" if err else "no Vulkan device"
        return (f"--iree-vulkan-target={VULKAN_BASELINE}",), why
    name = str(devices[0].get("name", ""))
    if "llvmpipe" in name.lower() or "lavapipe" in name.lower():
        return (f"--iree-vulkan-target={VULKAN_BASELINE}",
                f"--iree-vulkan-target-features={LLVMPIPE_FEATURES}",
                # It has float64: keep it, like the cpu target.
                "--iree-input-demote-f64-to-f32=false"), name
    sms = cuda_device_sms()
    arch = vulkan_target_for(name, sms[0] if sms else None)
    if arch is None or not _checked_vulkan_target(arch):
        arch = VULKAN_BASELINE
    return (f"--iree-vulkan-target={arch}",), name


VULKAN_CONV_LAYOUT = ("--iree-preprocessing-pass-pipeline=builtin.module(util.func("
                      "iree-preprocessing-convert-conv-to-channels-last))")
"""PyTorch's convolutions are NCHW; IREE's SPIR-V code generation is tuned
for NHWC. Left NCHW, the weight gradient of a 3x3 convolution gets a
configuration in which every invocation of a workgroup repeats the whole
workgroup's work (~300x slower on llvmpipe); converted, it is tiled like a
matmul. (``--iree-global-opt-use-im2col-for-convs`` is no alternative: on
IREE 3.13 it computes that weight gradient wrongly from batch 4 on.)"""


VULKAN_I64_DEMOTION = "--iree-input-demote-i64-to-i32"
"""int64 as int32 on Vulkan devices (``passes.int64_range`` says why, and
refuses graphs whose int64 values may not fit; ``runtime.session`` checks
int64 data moved to the device). ``LAZY_MLIR_VULKAN_INT64=1`` keeps int64
(graphs with 64-bit integer vectors then fail to compile and run eagerly)."""


def narrows_int64(target_name: str) -> bool:
    """Whether ``target_name``'s modules hold int64 tensors as int32."""
    return target_name == "vulkan" and os.environ.get(
        "LAZY_MLIR_VULKAN_INT64", "").strip().lower() not in ("1", "true", "yes", "on")


def _vulkan(arch: str | None = None) -> Target:
    env = os.environ.get("LAZY_MLIR_VULKAN_TARGET", "").strip()
    if arch:
        flags, device = (f"--iree-vulkan-target={arch}",), f"requested {arch}"
    elif env:
        flags, device = (f"--iree-vulkan-target={env}",), f"LAZY_MLIR_VULKAN_TARGET={env}"
    else:
        flags, device = _detected_vulkan()
    features = os.environ.get("LAZY_MLIR_VULKAN_FEATURES", "").strip()
    if features:
        flags = tuple(f for f in flags if not f.startswith("--iree-vulkan-target-features="))
        flags += (f"--iree-vulkan-target-features={features}",)
    if narrows_int64("vulkan"):
        flags += (VULKAN_I64_DEMOTION,)
    return Target("vulkan", "vulkan-spirv", "vulkan", flags + (VULKAN_CONV_LAYOUT,),
                  device=device)


F32_STATISTICS_TARGETS = frozenset({"vulkan", "cuda"})
"""Targets whose ``var`` / ``std`` of float32 (and narrower) tensors are
computed in float32 (``passes.variance_f32``), not in torch-mlir's float64:
GPUs have little or no float64, and on Vulkan the float64 reductions exceed
the workgroup memory limit. The cpu target keeps float64 accumulation, as
eager ATen does."""


WIDE_SUM_TARGETS = frozenset({"cpu", "vulkan", "cuda"})
"""Targets whose sums of more than ``passes.wide_sums.MAX_TERMS`` tensors
are computed as one reduction of their stack. IREE 3.13 fuses a long chain of
additions into one dispatch with a binding (or a push constant) per term, and
no target takes that many: Vulkan devices may take only 32 push constants
(128 bytes), IREE's CPU runtime refuses a dispatch of more than 32 bindings
(``binding count 33 > 32``: a policy-gradient loop of 30 steps, whose
weights' gradients sum 30 terms, died at its second episode), CUDA 16."""


# -- cuda ------------------------------------------------------------------

CUDA_DEFAULT_SM = 80
CUDA_KNOWN_SMS = (60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 120, 121)
"""The SMs iree-compile 3.13 has descriptions for (checked by compiling).
A device with another SM gets the newest known one below it: PTX is
compiled further by the driver for the device it runs on."""


@functools.lru_cache(maxsize=None)
def cuda_device_sms() -> tuple[int, ...]:
    """Compute capabilities (e.g. 86) of the CUDA devices, from the driver
    library (libcuda) through ctypes; () when there is none."""
    import ctypes
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        try:
            cuda = ctypes.CDLL("libcuda.so")
        except OSError:
            return ()
    try:
        if cuda.cuInit(0) != 0:
            return ()
        count = ctypes.c_int()
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return ()
        out = []
        for i in range(count.value):
            dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
            if cuda.cuDeviceGet(ctypes.byref(dev), i) != 0:
                continue
            # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
            cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)
            cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
            out.append(major.value * 10 + minor.value)
        return tuple(out)
    except Exception:  # a broken driver install: behave as if absent
        return ()


def parse_sm(text: str) -> int:
    """``sm_86`` / ``86`` / ``8.6`` -> 86."""
    s = str(text).strip().lower()
    m = re.fullmatch(r"(?:sm_?)?(\d+)(?:\.(\d))?a?", s)
    if not m:
        raise ValueError(f"lazy-mlir: {text!r} is not a CUDA SM (expected e.g. sm_86, 86 or 8.6)")
    return int(m.group(1)) * 10 + int(m.group(2)) if m.group(2) else int(m.group(1))


def _known_sm(sm: int) -> int:
    """``sm`` if iree-compile describes it, else the newest SM it knows below
    it (sm_90 -> sm_89); SMs below every known one are passed through."""
    if sm in CUDA_KNOWN_SMS or sm < CUDA_KNOWN_SMS[0]:
        return sm
    return [k for k in CUDA_KNOWN_SMS if k <= sm][-1]


def _cuda(sm: str | None = None) -> Target:
    requested = sm or os.environ.get("LAZY_MLIR_CUDA_SM", "").strip() or None
    if requested:
        asked = parse_sm(requested)
        value = _known_sm(asked)
        device = f"requested sm_{asked}" if sm else f"LAZY_MLIR_CUDA_SM=sm_{asked}"
        if value != asked:  # sm_90: IREE 3.13 has no description; its PTX runs on sm_89's
            device += f" (PTX for sm_{value}, compiled further by the driver)"
    else:
        sms = cuda_device_sms()
        if sms:
            value = _known_sm(sms[0])
            device = f"CUDA device 0 (sm_{sms[0]})"
        else:
            value, device = CUDA_DEFAULT_SM, f"no CUDA device; default sm_{CUDA_DEFAULT_SM}"
    return Target("cuda", "cuda", "cuda", (
        f"--iree-cuda-target=sm_{value}",
        # CUDA devices have float64: keep it, like the cpu target.
        "--iree-input-demote-f64-to-f32=false",
    ), device=device)


# -- the table ---------------------------------------------------------------

CPU_DRIVERS = ("local-task", "local-sync")


def cpu_driver() -> str:
    """The cpu target's IREE runtime driver: ``LAZY_MLIR_CPU_DRIVER``, else
    ``local-task`` (IREE's worker threads run the dispatches). Either way a
    module that calls PyTorch's kernels runs on a ``local-sync`` device
    (``Session._config_for_calls``); ``local-sync`` runs every module's
    dispatches on the thread that calls it. The compiled module is the same
    for both (``cache_key`` leaves the driver out)."""
    name = os.environ.get("LAZY_MLIR_CPU_DRIVER", "").strip().lower() or "local-task"
    if name not in CPU_DRIVERS:
        raise ValueError(f"lazy-mlir: LAZY_MLIR_CPU_DRIVER={name!r}: expected one of "
                         f"{', '.join(CPU_DRIVERS)}")
    return name


def _cpu(arch: str | None = None) -> Target:
    if arch:
        raise ValueError("lazy-mlir: the cpu target takes no architecture (it compiles "
                         "for the host CPU)")
    driver = cpu_driver()
    return CPU if driver == CPU.driver else dataclasses.replace(CPU, driver=driver)


_BUILDERS = {"cpu": _cpu, "vulkan": _vulkan, "cuda": _cuda}


class _Table(Mapping):
    """name -> Target, resolved (devices detected) on access."""

    def __getitem__(self, name: str) -> Target:
        return _BUILDERS[name]()

    def __iter__(self):
        return iter(_BUILDERS)

    def __len__(self) -> int:
        return len(_BUILDERS)


TARGETS: Mapping[str, Target] = _Table()
"""Every target by name, as ``get_target(name)`` resolves it now."""


def get_target(name: str | None = None) -> Target:
    """The target called ``name`` (default: ``LAZY_MLIR_TARGET``, else cpu).
    ``name`` may be ``base:arch`` (``vulkan:rdna3``, ``cuda:sm_86``)."""
    name = name or os.environ.get("LAZY_MLIR_TARGET", "cpu")
    base, _, arch = name.partition(":")
    base = base.strip().lower()
    try:
        builder = _BUILDERS[base]
    except KeyError:
        raise ValueError(f"lazy-mlir: unknown target {name!r}; choose one of "
                         f"{', '.join(sorted(_BUILDERS))}") from None
    return builder(arch.strip() or None)


# -- cpu worker threads ------------------------------------------------------

_threads_lock = threading.Lock()
_threads_applied: list[int | None] = [None]


def cpu_threads() -> int:
    """Worker threads for the cpu target: ``LAZY_MLIR_CPU_THREADS``, else
    the number of cores this process may run on."""
    env = os.environ.get("LAZY_MLIR_CPU_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"lazy-mlir: LAZY_MLIR_CPU_THREADS={env!r}: expected a "
                             "positive number of threads")
        return n
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def configure_cpu_threads() -> int:
    """Set the ``local-task`` driver's worker count (``cpu_threads()``)
    through IREE's process-wide flags, once; returns the count in effect
    for drivers created from now on. Call before the driver is first made."""
    n = cpu_threads()
    with _threads_lock:
        if _threads_applied[0] != n:
            import iree.runtime as rt
            rt.flags.parse_flags(f"--task_topology_group_count={n}")
            if _threads_applied[0] is not None:
                log.debug("lazy-mlir: cpu threads changed to %d; the local-task driver "
                          "already running keeps its workers", n)
            _threads_applied[0] = n
    return n
