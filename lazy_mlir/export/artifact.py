"""Load and run a lazy-mlir export artifact with IREE's runtime and numpy alone.

This file imports only the standard library, numpy and ``iree.runtime``: no
torch, no torch-mlir, no IREE compiler, nothing else from lazy-mlir. Every
artifact carries a copy of it as ``run.py``, so a machine with
``pip install iree-base-runtime numpy`` can use the artifact::

    import run                               # or: from lazy_mlir.export import load
    fn = run.load("lenet/")                  # verifies checksums, loads the module
    logits = fn(x)                           # numpy in, numpy out
    # python lenet/run.py lenet/ --input x.npy --output y.npy

An artifact directory holds:

- ``manifest.json``: the entry point with its input and output names, shapes
  (an int, or a symbol for a size chosen at run time, with its range) and dtypes; the
  parameters (name, shape, dtype, bytes); the target and iree-compile flags;
  the versions of the tools that built it; the cache key; and the sha256 and
  size of every other file.
- ``module.vmfb``: the compiled IREE module.
- ``params.irpa``: an IREE parameter archive, present when parameters are
  external (``params="external"``) and for train steps (the initial state).
- ``run.py``: this file.

Guarantees:

- ``load`` checks the manifest's format and version and every file's size and
  sha256 before the runtime sees a byte; a missing or corrupted file raises
  ``ArtifactError`` naming the file, never a crash inside the runtime.
- A call checks the number, dtypes and shapes of its arguments (a symbolic
  size must be in its range and agree across arguments) and raises
  ``SignatureError`` naming the expected signature. Arrays are never cast
  silently, and the caller's arrays are never written.
- Results are numpy arrays the caller owns (copied out of device memory).
- ``save_params`` replaces the weights of an artifact with external
  parameters without recompiling: names, shapes and dtypes must match the
  manifest; the archive and its checksum are rewritten atomically.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile

import numpy as np

FORMAT = "lazy-mlir-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
MODULE = "module.vmfb"
PARAMS = "params.irpa"
RUNNER = "run.py"
SCOPE = "model"
"""The parameter scope of every artifact (``#flow.parameter.named<"model"::key>``)."""

__all__ = ["load", "read_manifest", "read_params", "save_params", "ArtifactError",
           "SignatureError", "ExportedFunction", "TrainStep", "main"]


class ArtifactError(ValueError):
    """An artifact that cannot be used: missing, corrupted, or built for
    something this runtime does not have. The message says which file and why."""


class SignatureError(ArtifactError, TypeError):
    """Arguments that do not match the entry point's signature."""


# -- manifest and files ---------------------------------------------------------

def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(path) -> dict:
    """The manifest of the artifact directory ``path``, format-checked."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise ArtifactError(f"lazy-mlir: no artifact directory at {path}")
    mpath = os.path.join(path, MANIFEST)
    try:
        with open(mpath) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise ArtifactError(f"lazy-mlir: {path} is not an export artifact (no {MANIFEST})") \
            from None
    except (OSError, ValueError) as e:
        raise ArtifactError(f"lazy-mlir: {mpath} is unreadable or not JSON ({e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArtifactError(f"lazy-mlir: {mpath} is not a lazy-mlir export manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArtifactError(f"lazy-mlir: {mpath} has format version "
                            f"{manifest.get('format_version')}; this runner reads "
                            f"version {FORMAT_VERSION} (re-export with this lazy-mlir)")
    return manifest


def verify_files(path, manifest: dict) -> None:
    """Every file the manifest lists exists with its recorded size and sha256."""
    path = os.fspath(path)
    for name, info in manifest.get("files", {}).items():
        fpath = os.path.join(path, name)
        try:
            size = os.path.getsize(fpath)
        except OSError:
            raise ArtifactError(f"lazy-mlir: artifact {path} is missing {name}") from None
        if size != info["size"]:
            raise ArtifactError(f"lazy-mlir: {fpath} is corrupted: {size} bytes, the "
                                f"manifest says {info['size']} (re-export the artifact)")
        if _sha256(fpath) != info["sha256"]:
            raise ArtifactError(f"lazy-mlir: {fpath} is corrupted: its sha256 does not "
                                "match the manifest (re-export the artifact)")


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:
            raise ArtifactError("lazy-mlir: this artifact uses bfloat16, which numpy "
                                "reads only with the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return np.dtype(name)
    except TypeError:
        raise ArtifactError(f"lazy-mlir: unknown dtype {name!r} in the manifest") from None


def _spec_text(spec: dict) -> str:
    dims = ",".join(str(d) for d in spec["shape"])
    return f"{spec['name']}: {spec['dtype']}[{dims}]"


def signature_text(entry: dict) -> str:
    """``forward(x: float32[batch,1,28,28]) -> (output: float32[batch,10])``,
    followed by the range of a size symbol when it is not 1 or more
    (``where h >= 3``)."""
    ins = ", ".join(_spec_text(s) for s in entry["inputs"])
    outs = ", ".join(_spec_text(s) for s in entry["outputs"])
    ranges = [f"{lo} <= {sym} <= {hi}" if hi else f"{sym} >= {lo}"
              for sym, r in entry.get("dims", {}).items()
              for lo, hi in [(r.get("min", 1), r.get("max"))] if lo != 1 or hi]
    where = f" where {', '.join(ranges)}" if ranges else ""
    return f"{entry['name']}({ins}) -> ({outs}){where}"


# -- parameters -------------------------------------------------------------

def _load_index(path: str, manifest: dict):
    """The parameter index of ``path``, checked against the manifest."""
    import iree.runtime as rt
    index = rt.ParameterIndex()
    try:
        index.load(path)
    except Exception as e:
        raise ArtifactError(f"lazy-mlir: {path} is not a readable parameter archive "
                            f"({' '.join(str(e).split())})") from None
    entries = {index[i].key: index[i] for i in range(len(index))}
    for p in manifest["params"]["entries"]:
        e = entries.get(p["name"])
        if e is None:
            raise ArtifactError(f"lazy-mlir: {path} has no parameter {p['name']!r}")
        if e.length != p["nbytes"]:
            raise ArtifactError(f"lazy-mlir: parameter {p['name']!r} in {path} has "
                                f"{e.length} bytes; expected {p['nbytes']} "
                                f"({p['dtype']}{p['shape']})")
    return index, entries


def read_params(path, params_file=None) -> dict:
    """The parameters (and, for a train step, the initial state) stored in the
    artifact's archive, as numpy arrays the caller owns, in manifest order."""
    path = os.fspath(path)
    manifest = read_manifest(path)
    if not manifest["params"]["entries"]:
        return {}
    if manifest["params"]["file"] is None and params_file is None:
        raise ArtifactError(f"lazy-mlir: {path} embeds its parameters in the module; "
                            "there is no archive to read")
    own = manifest["params"]["file"]
    if params_file is None:
        verify_files(path, {"files": {k: v for k, v in manifest["files"].items() if k == own}})
    pfile = os.fspath(params_file) if params_file else os.path.join(path, own)
    _, entries = _load_index(pfile, manifest)
    out = {}
    for p in manifest["params"]["entries"]:
        e = entries[p["name"]]
        raw = (np.frombuffer(e.file_view, dtype=np.uint8) if e.is_file
               else np.frombuffer(e.splat_pattern, dtype=np.uint8))
        if e.is_splat:
            raw = np.tile(raw, p["nbytes"] // max(raw.size, 1))
        out[p["name"]] = raw.view(_dtype(p["dtype"])).reshape(p["shape"]).copy()
    return out


def write_archive(path, arrays) -> None:
    """An IREE parameter archive (.irpa) of ``arrays``: (name, ndarray) pairs.
    Entries carry IREE's tensor metadata (dtype, shape) when IREE knows the
    dtype; the manifest records both in any case."""
    import iree.runtime as rt
    from iree.runtime.io import parameter_index_add_numpy_ndarray
    index = rt.ParameterIndex()
    keep = []  # the index refers to the arrays' memory until the file is written
    for name, a in arrays:
        a = np.ascontiguousarray(a)
        keep.append(a)
        try:
            parameter_index_add_numpy_ndarray(index, name, a)
        except (KeyError, ValueError, TypeError):
            index.add_buffer(name, a.reshape(-1).view(np.uint8))
    index.create_archive_file(os.fspath(path))


def save_params(path, arrays: dict) -> None:
    """Replace the artifact's archive with ``arrays`` (name -> array): every
    parameter of the manifest, each with its recorded shape and dtype.
    The module is not recompiled; the manifest's checksum is updated."""
    path = os.fspath(path)
    manifest = read_manifest(path)
    pname = manifest["params"]["file"]
    if pname is None:
        raise ArtifactError(f"lazy-mlir: {path} embeds its parameters in the module; "
                            "export with params='external' to swap weights")
    expected = {p["name"]: p for p in manifest["params"]["entries"]}
    missing = sorted(set(expected) - set(arrays))
    extra = sorted(set(arrays) - set(expected))
    if missing or extra:
        raise ArtifactError(f"lazy-mlir: save_params: missing {missing or 'none'}, "
                            f"unknown {extra or 'none'}")
    checked = []
    for name, p in expected.items():
        a = np.asarray(arrays[name])
        if a.dtype != _dtype(p["dtype"]) or list(a.shape) != list(p["shape"]):
            raise ArtifactError(f"lazy-mlir: save_params: {name} is {a.dtype}{list(a.shape)}; "
                                f"expected {p['dtype']}{p['shape']}")
        checked.append((name, a))
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp-", suffix=".irpa")
    os.close(fd)
    try:
        write_archive(tmp, checked)
        _usual_mode(tmp)
        manifest["files"][pname] = {"sha256": _sha256(tmp), "size": os.path.getsize(tmp)}
        os.replace(tmp, os.path.join(path, pname))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _write_json(os.path.join(path, MANIFEST), manifest)


def _write_json(path: str, data: dict) -> None:
    """``data`` as indented JSON (lists of scalars on one line), atomically."""
    text = json.dumps(data, indent=2)
    # A shape reads better as [1, 1, 28, 28] than as six lines (JSON strings
    # hold no raw newlines, so ",\n" only ever separates elements).
    text = re.sub(r"\[\s*([^\[\]{}]*?)\s*\]",
                  lambda m: "[" + re.sub(r",\n\s*", ", ", m.group(1)) + "]", text)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(text + "\n")
    _usual_mode(tmp)
    os.replace(tmp, path)


def _usual_mode(path: str) -> None:
    """The permissions ``open`` would give (temporary files are private, but
    an artifact is meant to be copied and read by others)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if os.path.isdir(path) else 0o666) & ~umask)


# -- the runtime --------------------------------------------------------------

HOST_DRIVERS = ("local-task", "local-sync")
"""Drivers whose device memory is host memory: IREE's own numpy interop works."""

_devices: dict = {}


class _Device:
    """An IREE device and the transfers that work on it.

    On the CPU drivers numpy arrays go through ``asdevicearray`` and results
    are mapped. Other drivers (Vulkan, CUDA) may refuse to import unaligned
    host memory and may not map results, so inputs are written into mappable
    host-local buffers the device reads, and results are copied back through
    a staging buffer on the device's queue.
    """

    def __init__(self, driver: str):
        import iree.runtime as rt
        self.rt = rt
        available = sorted(rt.query_available_drivers())
        if driver not in available:
            raise ArtifactError(f"lazy-mlir: this artifact needs the IREE driver {driver!r}, "
                                f"which this iree-base-runtime does not have (drivers: "
                                f"{', '.join(available) or 'none'})")
        try:
            self.hal = rt.get_driver(driver).create_default_device()
        except Exception as e:
            raise ArtifactError(f"lazy-mlir: the IREE driver {driver!r} has no usable "
                                f"device: {' '.join(str(e).split())}") from None
        self.host_memory = driver in HOST_DRIVERS

    def upload(self, a: np.ndarray):
        rt = self.rt
        if self.host_memory:
            return rt.asdevicearray(self.hal, a)
        from iree.runtime.array_interop import map_dtype_to_element_type
        buf = self.hal.allocator.allocate_buffer(
            memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
            allowed_usage=rt.BufferUsage.DEFAULT | rt.BufferUsage.MAPPING_SCOPED,
            allocation_size=max(a.nbytes, 1))
        if a.nbytes:
            mapped = buf.map()
            mapped.asarray([a.nbytes], np.dtype(np.uint8))[...] = a.reshape(-1).view(np.uint8)
            del mapped
        view = rt.HalBufferView(buf, list(a.shape), map_dtype_to_element_type(a.dtype))
        return rt.DeviceArray(self.hal, view, implicit_host_transfer=True,
                              override_dtype=a.dtype)

    def download(self, d) -> np.ndarray:
        """A host copy of a device array, in the element type the device holds."""
        rt = self.rt
        if self.host_memory:
            return np.array(d.to_host(), copy=True)
        view = d._buffer_view
        src = view.get_buffer()
        size = src.byte_length()
        staging = self.hal.allocator.allocate_buffer(
            memory_type=rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE,
            allowed_usage=rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED,
            allocation_size=max(size, 1))
        sem = self.hal.create_semaphore(0)
        self.hal.queue_copy(src, staging, wait_semaphores=rt.HalFence.create_at(sem, 0),
                            signal_semaphores=rt.HalFence.create_at(sem, 1))
        rt.HalFence.create_at(sem, 1).wait()
        raw = np.array(staging.map().asarray([size], np.dtype(np.uint8))[:view.byte_length])
        dtype = rt.HalElementType.map_to_dtype(view.element_type)
        return raw.view(dtype).reshape(list(view.shape))


def _device(driver: str) -> _Device:
    """One device per driver per process (IREE drivers are process-wide)."""
    if driver not in _devices:
        _devices[driver] = _Device(driver)
    return _devices[driver]


class ExportedFunction:
    """A loaded entry point: ``fn(*arrays)`` -> array, or tuple / dict of arrays.

    ``signature`` is the expected signature as text; ``manifest`` the parsed
    manifest; ``device`` the IREE device it runs on.
    """

    def __init__(self, path: str, manifest: dict, *, driver: str | None = None,
                 params_file=None):
        import iree.runtime as rt
        self.path = path
        self.manifest = manifest
        self._params_file = params_file
        self.entry = manifest["entry"]
        self.signature = signature_text(self.entry)
        self.driver = driver or manifest["target"]["driver"]
        self._dev = _device(self.driver)
        self.device = self._dev.hal
        # IREE demotes float64 arguments to float32 unless told not to.
        self._demotes_f64 = "--iree-input-demote-f64-to-f32=false" not in manifest["flags"]
        instance = rt.VmInstance()
        modules = [rt.create_hal_module(instance, self.device)]
        params = manifest["params"]
        if params["mode"] == "external" and params["entries"]:
            pfile = os.fspath(params_file) if params_file else os.path.join(path, params["file"])
            self._index, _ = _load_index(pfile, manifest)
            modules.append(rt.create_io_parameters_module(
                instance, self._index.create_provider(scope=SCOPE)))
        with open(os.path.join(path, MODULE), "rb") as f:
            vmfb = f.read()
        try:
            module = rt.VmModule.copy_buffer(instance, vmfb)
            self._context = rt.VmContext(instance, modules=modules + [module])
        except Exception as e:
            raise ArtifactError(f"lazy-mlir: IREE cannot load {os.path.join(path, MODULE)}: "
                                f"{' '.join(str(e).split())}") from None
        fn = module.lookup_function(self.entry["function"])
        if fn is None:
            raise ArtifactError(f"lazy-mlir: {MODULE} has no function "
                                f"{self.entry['function']!r}")
        self._invoke = rt.FunctionInvoker(self._context, self.device, fn)
        self._in_dtypes = [_dtype(s["dtype"]) for s in self.entry["inputs"]]
        self._clobbered = set(self.entry.get("clobbered", ()))
        self._dims = self.entry.get("dims", {})  # symbol -> {"min", "max"}

    def __repr__(self) -> str:
        return f"<lazy-mlir export {self.signature} on {self.driver}>"

    def check(self, args, first: int = 0, stop: int | None = None) -> list[np.ndarray]:
        """``args`` (for inputs ``first`` to ``stop``, default all) as
        contiguous arrays, or ``SignatureError`` naming the expected signature."""
        specs = self.entry["inputs"][first:stop]
        if len(args) != len(specs):
            raise SignatureError(f"lazy-mlir: expected {len(specs)} argument(s) for "
                                 f"{self.signature}; got {len(args)}")
        arrays = []
        sizes: dict[str, int] = {}
        for i, (a, spec) in enumerate(zip(args, specs), first):
            dtype = self._in_dtypes[i]
            got = _describe(a)
            if not isinstance(a, (np.ndarray, np.generic)) or a.dtype != dtype:
                raise SignatureError(f"lazy-mlir: argument {i} ({spec['name']}) is {got}; "
                                     f"expected {_spec_text(spec)} in {self.signature}")
            a = np.asarray(a)
            ok = a.ndim == len(spec["shape"])
            for size, want in zip(a.shape, spec["shape"]) if ok else ():
                if isinstance(want, str):
                    r = self._dims.get(want, {})
                    ok = ok and r.get("min", 1) <= size <= (r.get("max") or size) and \
                        sizes.setdefault(want, size) == size
                else:
                    ok = ok and size == want
            if not ok:
                bound = ", ".join(f"{k}={v}" for k, v in sizes.items())
                raise SignatureError(f"lazy-mlir: argument {i} ({spec['name']}) is {got}; "
                                     f"expected {_spec_text(spec)} in {self.signature}"
                                     + (f" (with {bound})" if bound else ""))
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def _upload(self, a: np.ndarray):
        if self._demotes_f64 and a.dtype == np.float64:
            a = a.astype(np.float32)
        return self._dev.upload(a)

    def _run(self, arrays) -> list:
        """Device results of the entry point on ``arrays`` (checked numpy
        arrays, or device arrays from an earlier call); no host copies."""
        args = []
        for i, a in enumerate(arrays):
            if i in self._clobbered and not isinstance(a, np.ndarray):
                # The module may write into this argument (a sort's operand,
                # iree-org/iree#24665): never let it write into carried state.
                a = self._dev.download(a)
            # Uploads copy, so the caller's arrays are never written.
            args.append(self._upload(a) if isinstance(a, np.ndarray) else a)
        try:
            out = self._invoke(*args)
        except Exception as e:
            raise RuntimeError(f"lazy-mlir: {self.signature} failed in the IREE runtime: "
                               f"{' '.join(str(e).split())}") from None
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _to_host(self, results, first: int = 0) -> list[np.ndarray]:
        """Host copies of device results (for outputs ``first``, ...)."""
        out = []
        for r, spec in zip(results, self.entry["outputs"][first:]):
            host = self._dev.download(r)
            dtype = _dtype(spec["dtype"])
            if host.dtype != dtype:  # float64 demoted on the device, i1 stored as i8, ...
                host = host.astype(dtype)
            out.append(host)
        return out

    def __call__(self, *args):
        results = self._run(self.check(args))
        if self.entry.get("checks"):  # the last result: one flag per index check
            _raise_flagged(self._dev.download(results.pop()), self.entry["checks"])
        outs = self._to_host(results)
        kind = self.entry.get("output_structure", "single")
        if kind == "single":
            return outs[0]
        if kind == "dict":
            return {s["name"]: o for s, o in zip(self.entry["outputs"], outs)}
        return tuple(outs)


def _raise_flagged(flags: np.ndarray, checks: list) -> None:
    """Raise the exception of the first set flag (an index out of range:
    the module computed with it clamped, so its results are not returned)."""
    bad = [c for c, f in zip(checks, np.asarray(flags).reshape(-1).tolist()) if f]
    if bad:
        exc = {"IndexError": IndexError}.get(bad[0][0], RuntimeError)
        raise exc(f"lazy-mlir: {bad[0][1]}" + "".join(f"\n  also {m}" for _, m in bad[1:4]))


def _describe(a) -> str:
    if isinstance(a, (np.ndarray, np.generic)):
        return f"{a.dtype}[{','.join(str(d) for d in np.shape(a))}]"
    mod = type(a).__module__.split(".")[0]
    return f"a {mod + '.' if mod != 'builtins' else ''}{type(a).__name__} (pass numpy arrays)"


class TrainStep(ExportedFunction):
    """A loaded training step: (state..., batch...) -> (new state..., loss).

    ``state`` holds the current parameters, buffers and optimizer state
    (initially the archive's); ``step(*batch)`` runs one step on it and
    returns the loss as a float, keeping the state on the device between
    steps. ``fn(state_dict, *batch)`` is the pure form: it returns
    ``(new_state_dict, loss)`` and leaves ``state`` alone.
    """

    def __init__(self, path, manifest, **kw):
        super().__init__(path, manifest, **kw)
        self.state_names = list(self.entry["state"])
        self.batch_specs = self.entry["inputs"][len(self.state_names):]
        self._state = None  # device arrays, in state order

    @property
    def state(self) -> dict:
        """The current state as numpy arrays (copies)."""
        if self._state is None:
            return self.initial_state()
        return dict(zip(self.state_names, self._to_host(self._state)))

    def initial_state(self) -> dict:
        """The state the artifact was exported with (from its archive)."""
        params = read_params(self.path, self._params_file)
        return {n: params[n] for n in self.state_names}

    def reset(self, state: dict | None = None) -> None:
        """Start again from ``state`` (default: the archive's initial state)."""
        state = state if state is not None else self.initial_state()
        missing = [n for n in self.state_names if n not in state]
        if missing:
            raise SignatureError(f"lazy-mlir: state is missing {', '.join(missing)}")
        n = len(self.state_names)
        arrays = self.check([state[k] for k in self.state_names], 0, n)
        self._state = [self._upload(a) for a in arrays]

    def step(self, *batch) -> float:
        """One training step on ``state``; the loss as a float."""
        if self._state is None:
            self.reset()
        n = len(self.state_names)
        out = self._run(self._state + self.check(list(batch), first=n))
        self._state = out[:n]
        return float(self._to_host(out[n:], first=n)[0].reshape(()))

    def __call__(self, state: dict, *batch):
        missing = [n for n in self.state_names if n not in state]
        if missing:
            raise SignatureError(f"lazy-mlir: state is missing {', '.join(missing)}")
        outs = self._to_host(self._run(self.check([state[n] for n in self.state_names]
                                                  + list(batch))))
        n = len(self.state_names)
        return dict(zip(self.state_names, outs[:n])), outs[n]


def load(path, *, driver: str | None = None, params=None, verify: bool = True):
    """The artifact at ``path`` as a callable: ``ExportedFunction`` for an
    exported function or module, ``TrainStep`` for an exported training step.

    ``driver`` overrides the IREE driver the manifest names (e.g.
    ``local-sync``); ``params`` loads another archive with the same names,
    shapes and dtypes instead of the artifact's own; ``verify=False`` skips
    the checksums (not the format checks).
    """
    path = os.fspath(path)
    manifest = read_manifest(path)
    used = [MODULE]
    if manifest["params"]["file"] and params is None:
        used.append(manifest["params"]["file"])  # a replacement is checked by its names
    for name in used:
        if not os.path.isfile(os.path.join(path, name)):
            raise ArtifactError(f"lazy-mlir: artifact {path} is missing {name}")
    if verify:
        files = manifest.get("files", {})
        verify_files(path, {"files": {k: files[k] for k in used if k in files}})
    cls = TrainStep if manifest.get("kind") == "train_step" else ExportedFunction
    return cls(path, manifest, driver=driver, params_file=params)


# -- command line ---------------------------------------------------------------

def run_cli(path, inputs: list[str], outputs: list[str] | None = None,
            driver: str | None = None, out=sys.stdout) -> int:
    """``run``: load ``path``, call it on .npy inputs, save or print results."""
    fn = load(path, driver=driver)
    if isinstance(fn, TrainStep):
        raise ArtifactError(f"lazy-mlir: {path} is a training step; load it from Python "
                            "(load(path).step(*batch))")
    arrays = []
    for name in inputs:
        try:
            arrays.append(np.load(name, allow_pickle=False))
        except FileNotFoundError:
            raise ArtifactError(f"lazy-mlir: no such input file: {name}") from None
        except (OSError, ValueError) as e:
            raise ArtifactError(f"lazy-mlir: {name} is not a .npy file ({e})") from None
    result = fn(*arrays)
    results = (list(result.values()) if isinstance(result, dict)
               else list(result) if isinstance(result, tuple) else [result])
    specs = fn.entry["outputs"]
    outputs = list(outputs or [])
    if outputs and len(outputs) != len(results):
        raise ArtifactError(f"lazy-mlir: {len(results)} output(s) but {len(outputs)} "
                            "--output file(s)")
    for i, (r, spec) in enumerate(zip(results, specs)):
        line = f"{spec['name']}: {r.dtype}{list(r.shape)}"
        if outputs:
            np.save(outputs[i], r)
            line += f" -> {outputs[i]}"
        elif r.size <= 64:
            line += " = " + np.array2string(r, precision=5, separator=", ",
                                            max_line_width=1 << 20)
        print(line, file=out)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="run.py", description="Run a lazy-mlir export artifact (needs only numpy "
                                   "and iree-base-runtime).")
    p.add_argument("artifact", nargs="?", default=os.path.dirname(os.path.abspath(__file__)),
                   help="the artifact directory (default: the one holding this file)")
    p.add_argument("--input", "-i", action="append", default=[], metavar="X.npy",
                   help="an input as a .npy file, one per argument, in order")
    p.add_argument("--output", "-o", action="append", default=None, metavar="Y.npy",
                   help="write each output to a .npy file (default: print them)")
    p.add_argument("--driver", help="IREE driver to run on (default: the manifest's)")
    p.add_argument("--signature", action="store_true", help="print the signature and exit")
    args = p.parse_args(argv)
    try:
        if args.signature:
            print(signature_text(read_manifest(args.artifact)["entry"]))
            return 0
        return run_cli(args.artifact, args.input, args.output, args.driver)
    except ArtifactError as e:
        print(str(e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
