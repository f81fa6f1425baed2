"""One IREE runtime session per target: device, module loading, transfers.

Guarantees:

- ``Session(target)`` fails at once, with ``DeviceUnavailableError`` naming
  the IREE drivers this runtime has (and which of them have a device), when
  the target's driver is missing or cannot create a device. Compiling for the
  target never needs a session.
- ``to_device`` and ``to_host`` count every byte they move between host and
  device in ``TransferToDevice`` / ``TransferFromDevice``, whether or not the
  bytes were copied. On the cpu target (drivers ``local-task``/``local-sync``)
  they copy nothing when they can: a host tensor whose data is 64-byte aligned
  becomes a device buffer over the same memory (``ZeroCopyToDevice`` bytes),
  and a result is read through DLPack from the buffer the module wrote
  (``ZeroCopyFromDevice`` bytes). Callers must treat both as read-only, which
  lazy device data is; modules never write into them (see ``LoadedModule``).
  ``LAZY_MLIR_ZERO_COPY=0`` turns this off (every transfer copies).
- A vulkan target without 8/16-bit storage is refused on llvmpipe
  (``TargetMismatchError``): it would answer wrongly for narrow dtypes.
- On drivers whose buffers the host cannot map (Vulkan, CUDA), results are
  read back by a device copy into host memory: imported 4096-byte aligned
  host memory when the device can import it, else a mappable staging buffer.
- The cpu target's worker threads: ``LAZY_MLIR_CPU_THREADS`` (default: the
  cores this process may run on), applied before the ``local-task`` driver is
  first created in the process (it starts its workers then).
- A Vulkan device's busy-waiting driver threads (lavapipe with IREE 3.13:
  two, each a whole core, for the life of the device) run at nice 10
  (``spinning_threads``).
- On the cpu target (``local-task``), a thread waiting for a module's run or
  a queue copy does so under ``SCHED_BATCH`` (``waiting``): it no longer
  spins against the IREE worker that woke it.
- Freed memory stays in the heap on the cpu target
  (``host_memory.keep_freed_memory``, from ``import lazy_mlir`` on, or from
  the first host-memory device): IREE's per-call transient memory is then not
  page-faulted in again on every call.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import threading

import numpy as np
import torch

from .. import metrics
from ..config import switched_on
from ..targets import (LLVMPIPE_FEATURES, VULKAN_I64_DEMOTION, Target, configure_cpu_threads,
                       driver_devices)
from ..host_calls.runtime import attention as host_attention, blas as host_blas, rnn as host_rnn
from . import invoke, spinning_threads, waiting
from .host_memory import keep_freed_memory

log = logging.getLogger("lazy_mlir")

HOST_DRIVERS = ("local-task", "local-sync")
"""Drivers whose device memory is host memory: zero-copy transfers."""

ZERO_COPY_ALIGNMENT = 64
"""Host data is imported (not copied) only at this alignment: IREE's CPU code
may assume it for vector loads."""

VULKAN_IMPORT_ALIGNMENT = 4096
"""Vulkan's minImportedHostPointerAlignment on the devices we know (lavapipe):
imported host memory must start and end on this boundary."""


_by_device: dict[int, "Session"] = {}  # id(HalDevice) -> its session

_DEMOTED = {torch.float64: torch.float32, torch.complex128: torch.complex64}


class DeviceUnavailableError(RuntimeError):
    """A target's IREE runtime driver is missing or has no usable device."""


class TargetMismatchError(RuntimeError):
    """The device would run a target's modules, but compute wrong answers."""


NARROW_STORAGE = ("cap:StorageBuffer8BitAccess", "cap:StorageBuffer16BitAccess")
"""What llvmpipe needs to store bool/int8/16-bit tensors whose byte size is
not a multiple of 4 (``targets.LLVMPIPE_FEATURES``)."""


def _check_vulkan_storage(target: Target) -> None:
    """Refuse, saying what to do, a vulkan target without 8/16-bit storage
    on llvmpipe (lavapipe): its modules pack narrow tensors into 32-bit words
    and llvmpipe drops the last word of an odd-sized buffer, so results are
    silently wrong (issue 29: a 35-element bool mask from element 32 on,
    bfloat16 results zeros and garbage)."""
    if target.driver != "vulkan":
        return
    if target.device.startswith("no Vulkan device"):  # (targets._detected_vulkan)
        raise TargetMismatchError(
            f"lazy-mlir: the {target.name} target was resolved when the Vulkan driver "
            f"answered {target.device!r}, but a device was created since: its flags "
            "may not fit it; resolve the target again (lazy_mlir.set_target('vulkan'))")
    devices, _ = driver_devices("vulkan")
    name = str(devices[0].get("name", "")) if devices else ""
    if "llvmpipe" not in name.lower() and "lavapipe" not in name.lower():
        return
    features = ",".join(f.partition("=")[2] for f in target.flags
                        if f.startswith("--iree-vulkan-target-features="))
    missing = [c for c in NARROW_STORAGE if c not in features.split(",")]
    if missing:
        raise TargetMismatchError(
            f"lazy-mlir: the {target.name} target's flags ({target.device}) lack "
            f"{', '.join(missing)}, which {name} needs to store bool, int8 and 16-bit "
            "tensors of odd byte sizes correctly; unset LAZY_MLIR_VULKAN_TARGET (the "
            "detected device gets them), or set LAZY_MLIR_VULKAN_FEATURES="
            f"{LLVMPIPE_FEATURES}")


def _driver_report(rt) -> str:
    parts = []
    for name in sorted(rt.query_available_drivers()):
        devices, _ = driver_devices(name)
        parts.append(f"{name} ({len(devices)} device{'s' * (len(devices) != 1)})"
                     if devices else f"{name} (no device)")
    return ", ".join(parts) or "none"


_devices: dict[str, object] = {}  # driver -> its device, shared by that driver's sessions
_devices_lock = threading.Lock()


def _device_for(rt, target: Target):
    """The device of ``target``'s driver: one per driver and process, so data
    computed under one target's flags (say vulkan:rdna3) feeds another's
    (vulkan) without a copy."""
    with _devices_lock:
        device = _devices.get(target.driver)
        if device is None:
            device = _devices[target.driver] = _create_device(rt, target)
        return device


def _driver_device(rt, driver: str):
    return rt.get_driver(driver).create_default_device()


def _create_device(rt, target: Target):
    drivers = list(rt.query_available_drivers())
    hint = ("; run `lazy-mlir doctor` for details, or choose another target with "
            "lazy_mlir.set_target(...) / LAZY_MLIR_TARGET")
    if target.driver not in drivers:
        raise DeviceUnavailableError(
            f"lazy-mlir: target {target.name!r} needs the IREE runtime driver "
            f"{target.driver!r}, which this iree-base-runtime does not have; drivers "
            f"found: {', '.join(sorted(drivers)) or 'none'}{hint}")
    if target.driver == "local-task":
        configure_cpu_threads()
    if target.driver in HOST_DRIVERS:
        keep_freed_memory()
    try:
        before = spinning_threads.thread_ids() if target.driver == "vulkan" else set()
        # Under SCHED_OTHER: threads inherit their creator's policy, and the
        # local-task driver starts its workers when the driver is made, before
        # any device (the run thread that may get here is a batch thread).
        device = waiting.other_while(_driver_device, rt, target.driver)
        spinning_threads.calm(before)
        return device
    except Exception as e:
        why = " ".join(str(e).split())
        raise DeviceUnavailableError(
            f"lazy-mlir: target {target.name!r} cannot create a device with the IREE "
            f"driver {target.driver!r}: {why}\n  drivers found: {_driver_report(rt)}"
            f"{hint}") from None


# -- the session ---------------------------------------------------------------

class Session:
    """The IREE instance and device of a target; loads and runs modules."""

    def __init__(self, target: Target):
        import iree.runtime as rt
        self.rt = rt
        self.target = target
        self.device = _device_for(rt, target)
        _check_vulkan_storage(target)
        self.config = rt.Config(device=self.device)
        self.lock = threading.Lock()
        self.host_memory = target.driver in HOST_DRIVERS
        self.zero_copy = self.host_memory and switched_on("LAZY_MLIR_ZERO_COPY")
        self._import_readback = True   # until the device refuses an import
        self._blas = None
        self._rnn = None  # (the ``host_rnn`` import module, made once)
        self._attention = None  # (the ``host_attention`` import module, made once)
        self.calls_device = None  # (``_calls_config``: local-sync, for modules with host calls)
        self._calls_config = None
        self._empties: dict = {}  # (shape, dtype) -> its device array (``to_device``)
        self.batch_waits = target.driver == "local-task"  # (``waiting``: measured there)
        _by_device.setdefault(id(self.device), self)
        # IREE demotes float64 to float32 (arguments included) unless told not to.
        self.demotes_f64 = "--iree-input-demote-f64-to-f32=false" not in target.flags
        # int64 as int32 (targets.VULKAN_I64_DEMOTION): data moved in is checked.
        self.demotes_i64 = VULKAN_I64_DEMOTION in target.flags
        _quiet_shutdown()

    def load(self, vmfb: bytes, clobbered: tuple[int, ...] = (),
             passthrough: tuple[tuple[int, int], ...] = (),
             on_calling_thread: bool = False) -> "LoadedModule":
        """The module's ``main``, callable on device arrays; ``passthrough``:
        (result, argument) pairs where the result is the argument unchanged.
        ``on_calling_thread``: on ``local-task``, it runs on the calling
        thread alone (``_config_for_calls``' device), as modules with host
        calls do."""
        rt = self.rt
        calls = self.host_memory and [kind for kind, imports in (
            ("blas", host_blas.imports_blas), ("rnn", host_rnn.imports_rnn),
            ("attention", host_attention.imports_attention)) if imports(vmfb)]
        ctx = rt.SystemContext(config=self._config_for_calls() if calls or on_calling_thread
                               else self.config)
        if calls and "blas" in calls:  # before the module
            ctx.add_vm_module(self._blas_module())
        if calls and "rnn" in calls:
            if self._rnn is None:
                self._rnn = host_rnn.create_module(self.device)
            ctx.add_vm_module(self._rnn)
        if calls and "attention" in calls:
            if self._attention is None:
                self._attention = host_attention.create_module(self.device)
            ctx.add_vm_module(self._attention)
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
        loaded = LoadedModule(self, ctx.modules.module["main"], clobbered, passthrough)
        if ctx.config is not self.config:  # it computes on the calling thread: no wait to batch
            loaded.batch_waits = False
        return loaded

    def _config_for_calls(self):
        """The config of a module that calls PyTorch's kernels (``host_blas``,
        ``host_rnn``, ``host_attention``): on ``local-task``, one of a
        ``local-sync`` device, which runs the dispatches on the calling thread
        beside PyTorch's OpenMP team. Run by ``local-task``'s workers, the
        medium GPT-2's step module kept ~250 MB more of the heap after every
        call (IREE's allocator counts its buffers freed; glibc's heap keeps
        them in use; none on ``local-sync``) and took 510-830 against 476 ms.
        Arguments and results are host memory either device reads; results
        are made arrays of ``self.device`` (``LoadedModule``)."""
        if self.target.driver != "local-task":
            return self.config
        if self._calls_config is None:
            sync = dataclasses.replace(self.target, driver="local-sync")
            self.calls_device = _device_for(self.rt, sync)
            _by_device.setdefault(id(self.calls_device), self)
            self._calls_config = self.rt.Config(device=self.calls_device)
        return self._calls_config

    def _blas_module(self):
        """The ``lazy_mlir_blas`` import module (``host_blas``), made once."""
        if self._blas is None:
            self._blas = host_blas.create_module(self.device)
        return self._blas

    # -- host -> device ------------------------------------------------------

    def to_device(self, host: torch.Tensor):
        """A device array holding ``host`` (which must not change afterwards:
        on the cpu target the array may be ``host``'s own memory)."""
        if not host.numel():
            return self._empty(host)
        return self._upload(host)

    def _upload(self, host: torch.Tensor):
        host = host.detach().contiguous()
        if self.demotes_f64 and host.dtype in _DEMOTED:
            host = host.to(_DEMOTED[host.dtype])
        if self.demotes_i64 and host.dtype == torch.int64:
            host = _int64_as_int32(host, self.target.name)
        if host.dtype == torch.bfloat16:  # numpy has no bfloat16: go through ml_dtypes
            import ml_dtypes
            arr = host.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            arr = host.numpy()
        metrics.counter_inc("TransferToDevice", arr.nbytes)
        address = host.data_ptr()  # (arr's: numpy's ``ctypes.data`` costs a microsecond)
        if self.zero_copy and arr.nbytes and address % ZERO_COPY_ALIGNMENT == 0:
            out = self._import(arr, address, host)
            if out is not None:
                metrics.counter_inc("ZeroCopyToDevice", arr.nbytes)
                return out
        return self.rt.asdevicearray(self.device, arr)

    def _empty(self, host: torch.Tensor):
        """One device array per empty shape and dtype, made once: a step of
        ``transformers``' GPT-2 uploads four ``torch.tensor([])`` (its
        ``DynamicCache``), and nothing is ever written into an empty array."""
        key = (tuple(host.shape), host.dtype)
        out = self._empties.get(key)
        if out is None:
            out = self._empties[key] = self._upload(host)
        return out

    def _import(self, arr: np.ndarray, address: int, host: torch.Tensor):
        """A device array over ``arr``'s memory, which starts at ``address``
        and is ``host``'s (kept alive by the buffer), or None when the device
        will not import it."""
        rt = self.rt
        element_type = _element_type(arr.dtype)
        if element_type is None:
            return None
        memory, usage = _import_flags()
        kept = _bytes_of(host, address, arr.nbytes)
        try:
            buf = self.device.allocator.import_host_allocation(
                kept, memory_type=memory, allowed_usage=usage)
        except Exception as e:
            log.debug("lazy-mlir: host import refused (%s); copying", e)
            return None
        view = rt.HalBufferView(buf, list(arr.shape), element_type)
        out = rt.DeviceArray(self.device, view, implicit_host_transfer=True,
                             override_dtype=arr.dtype)
        # The binding keeps ``kept`` alive through the Python wrapper ``buf``
        # only, not through the buffer itself: hold both as long as the array.
        out._lazy_mlir_host = (buf, kept, address)
        return out

    # -- device -> host ------------------------------------------------------

    def to_host(self, array, spec) -> torch.Tensor:
        """The value of a device array as a host tensor of ``spec``'s shape and
        dtype (shared with the device buffer on the cpu target: read-only)."""
        if not self.owns(array):  # made under another target: its device reads it
            owner = _by_device.get(id(getattr(array, "_device", None)))
            if owner is not None:
                return owner.to_host(array, spec)
        view = array._buffer_view
        raw = self._read(view)
        metrics.counter_inc("TransferFromDevice", view.byte_length)
        if raw.dtype == spec.dtype and raw.shape == spec.shape:  # (DLPack's, as it is)
            return raw
        out = self._reinterpret(raw.reshape(-1), view, spec)
        return out.reshape(spec.shape)

    def _read(self, view) -> torch.Tensor:
        """The buffer view's elements as a host tensor: of its shape and
        element type when DLPack reads it in place, else its flat bytes."""
        buf = view.get_buffer()
        if self.host_memory and buf.memory_type() & int(self.rt.MemoryType.HOST_VISIBLE):
            try:
                out = torch.from_dlpack(self.device.create_dlpack_capsule(view, 1, 0))
            except Exception as e:  # an element type DLPack cannot express
                log.debug("lazy-mlir: DLPack read failed (%s); copying", e)
            else:
                if self.zero_copy:
                    metrics.counter_inc("ZeroCopyFromDevice", view.byte_length)
                    return out
                return out.clone()
        return self._read_by_copy(buf, view.byte_length)

    def _read_by_copy(self, buf, nbytes: int) -> torch.Tensor:
        """Copy a device buffer into host memory with the device's queue."""
        rt = self.rt
        alloc = self.device.allocator
        size = buf.byte_length()
        mem = rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE
        if self._import_readback:
            # DMA straight into a host tensor (4096-aligned, whole pages).
            padded = -(-max(size, 1) // VULKAN_IMPORT_ALIGNMENT) * VULKAN_IMPORT_ALIGNMENT
            backing = np.empty(padded + VULKAN_IMPORT_ALIGNMENT, dtype=np.uint8)
            skip = (-backing.ctypes.data) % VULKAN_IMPORT_ALIGNMENT
            host = backing[skip:skip + padded]
            usage = rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_PERSISTENT
            try:
                target = alloc.import_host_allocation(host, memory_type=mem,
                                                      allowed_usage=usage)
            except Exception as e:
                log.debug("lazy-mlir: the device cannot import host memory (%s); reading "
                          "back through staging buffers", e)
                self._import_readback = False
            else:
                self._copy(buf, target)
                del target
                return torch.from_numpy(host[:nbytes])
        usage = rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED
        staging = alloc.allocate_buffer(memory_type=mem, allowed_usage=usage,
                                        allocation_size=size)
        self._copy(buf, staging)
        mapped = staging.map()
        return torch.from_numpy(np.array(mapped.asarray([size], np.dtype(np.uint8))[:nbytes]))

    def _copy(self, source, target) -> None:
        """``source`` -> ``target`` (at least as long) on the device queue; waits."""
        rt = self.rt
        sem = self.device.create_semaphore(0)
        self.device.queue_copy(source, target,
                               wait_semaphores=rt.HalFence.create_at(sem, 0),
                               signal_semaphores=rt.HalFence.create_at(sem, 1))
        waiting.call_batched(self.batch_waits, rt.HalFence.create_at(sem, 1).wait)

    def _reinterpret(self, raw: torch.Tensor, view, spec) -> torch.Tensor:
        """Flat ``raw`` (the view's elements, or its bytes) as ``spec.dtype``."""
        data = raw if raw.dtype == torch.uint8 else raw.view(torch.uint8)
        et = view.element_type
        if self.rt.HalElementType.dense_byte_count(et) == spec.dtype.itemsize:
            return data.view(spec.dtype)
        # Stored in another width (Vulkan demotes float64 to float32): convert.
        return data.view(_torch_dtype(et)).to(spec.dtype)

    # -- device -> device ----------------------------------------------------

    def owns(self, array) -> bool:
        """Whether ``array`` lives on this session's device."""
        device = getattr(array, "_device", None)
        return device is self.device or (device is not None and device is self.calls_device)

    def adopt(self, array):
        """``array`` if it lives on this device, else a copy of it here, made
        through the host (counted as transfers both ways). Data computed for
        one target can so feed a graph of another (after ``set_target``)."""
        if self.owns(array):
            return array
        owner = _by_device.get(id(getattr(array, "_device", None)))
        view = array._buffer_view
        if owner is None:  # not made by a session: let IREE read it
            host = torch.from_numpy(np.ascontiguousarray(array.to_host()))
        else:
            raw = owner._read(view).reshape(-1)
            metrics.counter_inc("TransferFromDevice", view.byte_length)
            host = (raw if raw.dtype == torch.uint8 else raw.view(torch.uint8)).view(
                _torch_dtype(view.element_type))
        return self.to_device(host.reshape(list(view.shape)))

    def copy_on_device(self, array):
        """A new device array equal to ``array`` (a device-side copy)."""
        rt = self.rt
        view = array._buffer_view
        src = view.get_buffer()
        dst = self.device.allocator.allocate_buffer(
            memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
            allocation_size=src.byte_length())
        self._copy(src, dst)
        new_view = rt.HalBufferView(dst, list(view.shape), view.element_type)
        return rt.DeviceArray(self.device, new_view, implicit_host_transfer=True,
                              override_dtype=array.dtype)


class _HeldStorage:
    """The numpy interface of a tensor's memory that holds its storage, not
    a tensor over it: a tensor would share the storage, and an input that
    no tensor shares may take over a result's memory (``aot_writes``)."""

    __slots__ = ("storage", "__array_interface__")

    def __init__(self, storage, address: int, nbytes: int):
        self.storage = storage
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,),
                                    "typestr": "|u1", "version": 3}


def _bytes_of(host: torch.Tensor, address: int, nbytes: int) -> np.ndarray:
    """``host``'s ``nbytes`` bytes from ``address``, as a uint8 array that
    keeps ``host``'s storage alive."""
    return np.asarray(_HeldStorage(host.untyped_storage(), address, nbytes))


@functools.lru_cache(maxsize=None)
def _import_flags():
    """(memory type, allowed usage) of host memory imported by ``Session._import``."""
    import iree.runtime as rt
    return (rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE,
            rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING_SCOPED)


@functools.lru_cache(maxsize=None)
def _element_type(dtype: np.dtype):
    """IREE's element type of a numpy dtype (None where it has none)."""
    from iree.runtime.array_interop import map_dtype_to_element_type
    return map_dtype_to_element_type(dtype)


INT64_ON_DEVICE = 2 ** 30 - 1
"""The largest magnitude of int64 data on a device that holds int64 as
int32 (``passes.int64_range.ARGUMENT``)."""


def _int64_as_int32(host: torch.Tensor, target: str) -> torch.Tensor:
    """``host`` as int32 for a device that holds int64 as int32; raises,
    saying what to do, for a value that does not fit (never wraps it)."""
    if host.numel():
        lo, hi = int(host.min()), int(host.max())
        if lo < -INT64_ON_DEVICE or hi > INT64_ON_DEVICE:
            raise OverflowError(
                f"lazy-mlir: an int64 tensor holds {lo if lo < -INT64_ON_DEVICE else hi}, "
                f"outside +-(2**30 - 1), where the {target} target keeps int64 data (it "
                "computes int64 in 32 bits: passes/int64_range.py); run "
                "this part on the cpu target (lazy_mlir.set_target('cpu')), or set "
                "LAZY_MLIR_VULKAN_INT64=1 to keep 64-bit integers on Vulkan")
    return host.to(torch.int32)


@functools.lru_cache(maxsize=None)
def _torch_dtype(element_type) -> torch.dtype:
    """The torch dtype of an IREE element type (through numpy's)."""
    import iree.runtime as rt
    if int(element_type) == int(rt.HalElementType.BFLOAT_16):
        return torch.bfloat16
    return torch.from_numpy(np.empty(0, rt.HalElementType.map_to_dtype(element_type))).dtype


class LoadedModule:
    """A loaded ``main``, called on device arrays; device data stays immutable.

    IREE may write a result into the buffer of an argument and return that
    buffer: ``iree_linalg_ext.sort`` into its operand (iree-org/iree#24665),
    an ``insert_slice`` (``x[2:] = ...``) into the tensor it updates when
    that is the argument's last use. So the first call runs on copies of all
    arguments (made on the device) and notes which arguments came back as
    results; those, and ``clobbered`` (found in the IR), are copied before
    every later call. Imported host memory (zero-copy) is thus never written.

    A result that lies in an argument's memory (a view IREE returns of it)
    keeps that argument's imported host memory alive; which results do is
    also found at the first call (``invoke.views_of_arguments``). Other
    results hold nothing of the call's arguments: a step's outputs, fed to
    the next step, do not chain every step's uploads together.

    A result that is an argument returned unchanged (``passthrough``) is that
    argument itself: IREE may hand back one buffer for it and for another
    result written in place into the argument.
    """

    state = "loaded"  # (an Executable of the compile service, compile_service.executable)
    # Set on a module with dynamic dimensions (compile_service.size_families):
    # each run's result shapes are checked against its graph's (lazy.sync).
    dynamic_dims = False
    # The graph's fx module, run eagerly instead, once IREE's runtime refused
    # to run the module (lazy.sync)
    refused = None

    def __init__(self, session: Session, fn, clobbered: tuple[int, ...],
                 passthrough: tuple[tuple[int, int], ...] = ()):
        self.session = session
        self.fn = fn
        # list of arrays -> tuple of result arrays, of the session's device
        # also when ``fn`` runs on ``calls_device``: every owner check holds
        self.call = invoke.invoker(fn, session.device)
        self.clobbered = clobbered
        self.passthrough = passthrough
        self.batch_waits = session.batch_waits  # (``waiting``: while IREE's workers run it)
        self.aliased: frozenset[int] | None = None  # known after the first call
        self._copied: tuple[int, ...] = ()  # aliased and clobbered arguments
        # (result, arguments it lies in) pairs, known after the first call;
        # None: unknown (addresses unreadable), every result keeps every argument's.
        self.views: tuple | None = ()
        self.seconds: float | None = None  # the last run's wall time (set by lazy.sync)

    def __call__(self, *args):
        session = self.session
        device = session.device
        args = list(args)
        for i, a in enumerate(args):
            if getattr(a, "_device", None) is not device:  # (``owns``, inline)
                args[i] = session.adopt(a)  # (itself if it is of ``calls_device``)
        first = self.aliased is None
        if first:
            run = [session.copy_on_device(a) for a in args]
        else:
            run = args.copy()
            for i in self._copied:
                run[i] = session.copy_on_device(args[i])
        outs = waiting.call_batched(self.batch_waits, self.call, run)
        if first:
            self._learn(run, outs)
        views = self.views
        if views is None:
            keep = tuple(a._lazy_mlir_host for a in run if hasattr(a, "_lazy_mlir_host"))
            if keep:
                for o in outs:
                    o._lazy_mlir_host = keep
        elif views:
            for result, of in views:
                keep = tuple(run[i]._lazy_mlir_host for i in of
                             if hasattr(run[i], "_lazy_mlir_host"))
                if keep:
                    outs[result]._lazy_mlir_host = keep
        if self.passthrough:  # after the above: an argument keeps its own host memory
            outs = list(outs)
            for result, arg in self.passthrough:
                outs[result] = args[arg]
            outs = tuple(outs)
        return outs

    def _learn(self, run: list, outs: tuple) -> None:
        """After the first call (on copies of every argument): which
        arguments came back as results, which results lie in an argument."""
        buffers = [a._buffer_view.get_buffer() for a in run]
        results = [o._buffer_view.get_buffer() for o in outs]
        # An argument returned unchanged (``passthrough``) comes back as its
        # own buffer, unwritten: only another result in it makes it aliased
        # (an aot forward returns 19 of GPT-2's weights for its backward).
        unchanged = frozenset(self.passthrough)
        self.aliased = frozenset(i for i, b in enumerate(buffers)
                                 if any(r == b and (k, i) not in unchanged
                                        for k, r in enumerate(results)))
        self._copied = tuple(sorted(self.aliased.union(self.clobbered)))
        self.views = (invoke.views_of_arguments(self.session, run, outs)
                      if self.session.host_memory else ())


def _quiet_shutdown() -> None:
    # Lazy tensors held in user globals keep device arrays alive until the
    # interpreter tears down; nanobind would report each as a "leak".
    import iree.runtime._binding as binding
    binding.disable_leak_checker()


@functools.lru_cache(maxsize=None)
def session_for(target: Target) -> Session:
    return Session(target)
