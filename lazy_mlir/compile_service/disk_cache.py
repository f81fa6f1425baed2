"""The persistent compiled-module cache: content key -> .vmfb bytes on disk.

The in-memory ``ModuleCache`` forgets everything when the process exits; this
cache keeps the compiled modules so that the next run of the same model skips
IREE compilation. It stores bytes, not loaded modules: a hit is handed to
``Session.load`` like a freshly compiled module.

Layout under the root (``default_cache_dir()``)::

    modules/<key[:2]>/<key>.vmfb    header + module bytes
    modules/<key[:2]>/<key>.json    metadata for listing (graph, target, ...)
    compiling/<key>                 the pid of a process compiling it now

Guarantees:

- ``get`` returns exactly the bytes given to ``put`` for that key, or None.
  Each file starts with a header (magic, format version, payload length,
  sha256 of the payload); an entry that fails the check is counted as
  ``PersistentCacheCorrupt``, removed, and reported as a miss.
- Concurrent processes may share one root: files are written to a temporary
  name in the same directory and renamed into place (``os.replace`` is atomic),
  so a reader sees a whole old entry, a whole new one, or none. Readers and
  eviction tolerate files vanishing under them.
- No I/O error escapes. If the root cannot be created or written (read-only,
  full, not a directory), one warning is logged on the ``lazy_mlir`` logger
  and the cache turns itself off: ``put`` does nothing, ``get`` returns None.
- After ``put`` the total size is at most ``max_bytes`` (as seen by its own
  scan; concurrent writers may overshoot briefly), evicting the least
  recently used entries (by mtime, which ``get`` refreshes). The entry just
  written is never evicted, so one entry larger than ``max_bytes`` stays
  until the next ``put``.
- A compile in flight is shared: the process compiling a key marks it
  (``compiling``), so another process that misses it waits for that module
  (``compiling_elsewhere``) instead of compiling it again. A mark whose
  process is gone, or older than ``STALE_MARK_SECONDS``, is ignored.
- Keys never collide across tool versions: ``make_key`` hashes the versions of
  torch, torch-mlir, IREE and lazy-mlir, the host CPU and the format version.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import re
import struct
import tempfile
import threading
import time
from pathlib import Path

from .. import metrics
from ..config import switched_on

log = logging.getLogger("lazy_mlir")

FORMAT_VERSION = 2
"""Bump when the file layout or the key derivation changes: old entries then
miss (their keys differ) and age out through eviction. A change to the code
that lowers graphs needs no bump: its source is in the key
(``compiler_source_key``). 2 = results that return an argument unchanged are
recorded (``passthrough``)."""

DEFAULT_MAX_BYTES = 2 << 30
STALE_MARK_SECONDS = 1800  # twice the default compile time limit: its compiler died

_MAGIC = b"LZMLIRC\0"
_HEADER = struct.Struct("<8sIQ32s")  # magic, format version, payload length, sha256
_PACKAGES = ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "lazy-mlir")
_KEY_RE = re.compile(r"[0-9a-f]{16,128}")
_TMP_PREFIX = ".tmp-"
_STALE_TMP_SECONDS = 3600   # a temporary file this old belongs to a dead writer
_ORPHAN_META_SECONDS = 60   # a put writes metadata just before its module


@functools.lru_cache(maxsize=None)
def package_versions() -> dict[str, str]:
    """Installed versions of the packages whose output a module depends on;
    ``"unknown"`` for a package without distribution metadata."""
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "unknown"
    return out


# The packages of lazy_mlir whose code decides what a graph compiles to.
_COMPILER_DIRS = ("dialects", "ops", "passes", "pipeline", "runtime", "host_calls",
                  "frontends")  # (the torch.compile and train-step graphs are rewritten there)


@functools.lru_cache(maxsize=None)
def compiler_source_key() -> str:
    """A hash of lazy_mlir's lowering and runtime sources: a fixed
    decomposition or pass must not be answered with a module built before the
    fix, even when the package version did not change (an editable install)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for d in _COMPILER_DIRS:
        for path in sorted((root / d).rglob("*.py")):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def host_key() -> str:
    """The host CPU: architecture, model and feature flags.

    In the key because the cpu target compiles with
    ``--iree-llvmcpu-target-cpu=host``: a module built on one machine can
    crash with an illegal instruction on another sharing the cache directory.
    """
    parts = [platform.machine()]
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                name = line.split(":", 1)[0].strip()
                if name in ("model name", "flags", "Features", "CPU part"):
                    parts.append(line.strip())
                elif not line.strip() and len(parts) > 1:
                    break  # the first processor is enough
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def make_key(graph_key: str, target_key: str, config_key: str = "") -> str:
    """The sha256 hex naming one compiled module on disk.

    Different whenever any argument, any version in ``package_versions()``,
    lazy_mlir's lowering sources, the host CPU or ``FORMAT_VERSION`` differs. ``config_key`` must hold
    everything else that changes the module (input signature, compile options).
    """
    fields = [FORMAT_VERSION, graph_key, target_key, config_key,
              sorted(package_versions().items()), compiler_source_key(), host_key()]
    return hashlib.sha256(json.dumps(fields).encode()).hexdigest()


def cache_enabled() -> bool:
    """False when ``LAZY_MLIR_CACHE`` is 0 / false / off / no."""
    return switched_on("LAZY_MLIR_CACHE")


def default_cache_dir() -> Path:
    """``$LAZY_MLIR_CACHE_DIR``, else ``$XDG_CACHE_HOME/lazy-mlir`` (when
    absolute, as the XDG spec requires), else ``~/.cache/lazy-mlir``."""
    explicit = os.environ.get("LAZY_MLIR_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "lazy-mlir"
    return Path.home() / ".cache" / "lazy-mlir"


_defaults: dict[Path, DiskCache] = {}
_defaults_lock = threading.Lock()


def default_cache() -> DiskCache | None:
    """The process-wide cache at ``default_cache_dir()``, or None when
    ``LAZY_MLIR_CACHE=0``. The environment is read on every call; one instance
    is kept per location, so a broken location warns once per process."""
    if not cache_enabled():
        return None
    root = default_cache_dir()
    with _defaults_lock:
        if root not in _defaults:
            _defaults[root] = DiskCache(root)
        return _defaults[root]


class DiskCache:
    """Compiled modules under ``root``, at most ``max_bytes`` in total.

    Creating one touches no file; the directories are made by the first
    ``put``. See the module docstring for the guarantees.
    """

    make_key = staticmethod(make_key)

    def __init__(self, root: Path | str, max_bytes: int = DEFAULT_MAX_BYTES):
        self.root = Path(root)
        self.max_bytes = int(max_bytes)
        self._modules = self.root / "modules"
        self._enabled = True
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False once a write failed; stays False for this instance."""
        return self._enabled

    def _paths(self, key: str) -> tuple[Path, Path]:
        if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
            raise ValueError(f"lazy-mlir: bad cache key {key!r} (expected hex from make_key)")
        shard = self._modules / key[:2]
        return shard / f"{key}.vmfb", shard / f"{key}.json"

    def _disable(self, what: str, err: OSError) -> None:
        with self._lock:
            if not self._enabled:
                return
            self._enabled = False
        log.warning("lazy-mlir: cannot %s the compiled-module cache at %s (%s); continuing "
                    "without it (set LAZY_MLIR_CACHE_DIR to a writable directory, or "
                    "LAZY_MLIR_CACHE=0 to silence this)", what, self.root, err)

    # -- reading ---------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The module stored under ``key``, verified, or None (a miss).

        Counts ``PersistentCacheHit`` / ``PersistentCacheMiss`` /
        ``PersistentCacheCorrupt`` (a corrupt entry also counts as a miss).
        A hit refreshes the entry's mtime, which orders eviction.
        """
        path, _ = self._paths(key)
        if not self._enabled:
            return None
        try:
            with open(path, "rb") as f:
                blob = f.read()
                st = os.fstat(f.fileno())
        except OSError as e:
            # Not there (or the root is not a directory): an ordinary miss.
            if not isinstance(e, (FileNotFoundError, NotADirectoryError)):
                log.debug("lazy-mlir: cannot read cache entry %s: %s", path, e)
            metrics.counter_inc("PersistentCacheMiss")
            return None
        payload, problem = _unpack(blob)
        if problem:
            self._discard(path, st, problem)
            metrics.counter_inc("PersistentCacheMiss")
            return None
        try:
            t = time.time_ns()  # not UTIME_NOW: the kernel's clock is coarse (jiffies)
            os.utime(path, ns=(t, t))
        except OSError:
            pass  # gone already, or a read-only cache: LRU order is advisory
        metrics.counter_inc("PersistentCacheHit")
        return payload

    def _discard(self, path: Path, st: os.stat_result, problem: str) -> None:
        metrics.counter_inc("PersistentCacheCorrupt")
        log.warning("lazy-mlir: removed corrupted cache entry %s (%s)", path, problem)
        try:
            # Only the file we read: another process may have replaced it
            # with a good entry meanwhile.
            now = os.stat(path)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(path)
        except OSError:
            pass

    # -- compiles in flight ------------------------------------------------

    def _mark(self, key: str) -> Path:
        self._paths(key)  # (checks the key)
        return self.root / "compiling" / key

    def compiling(self, key: str):
        """A context that marks ``key`` as compiled by this process while it
        lasts (nothing is marked where the cache is off or unwritable)."""
        return _Marked(self, key)

    def compiling_elsewhere(self, key: str) -> bool:
        """Whether another live process marked ``key`` (``compiling``)."""
        if not self._enabled:
            return False
        path = self._mark(key)
        try:
            pid = int(path.read_text() or 0)
            fresh = time.time() - path.stat().st_mtime < STALE_MARK_SECONDS
        except (OSError, ValueError):
            return False
        if pid == os.getpid() or pid <= 0 or not fresh:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # (EPERM: alive, another user's)
            pass
        return True

    # -- writing ---------------------------------------------------------

    def put(self, key: str, data: bytes, meta: dict | None = None) -> None:
        """Store ``data`` under ``key`` (replacing any entry), then evict.

        ``meta`` is kept beside it for listing (suggested: ``graph``, a short
        summary, and ``target``); ``created`` and ``size`` are added. Values
        that are not JSON are stored as ``str``. Never raises ``OSError``.
        """
        path, meta_path = self._paths(key)
        if not self._enabled:
            return
        payload = memoryview(data).cast("B")
        header = _HEADER.pack(_MAGIC, FORMAT_VERSION, payload.nbytes,
                              hashlib.sha256(payload).digest())
        info = dict(meta or {})
        info.update(key=key, size=payload.nbytes, created=time.time())
        for attempt in (1, 2):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                self._disable("create", e)
                return
            try:
                # Metadata first: whenever a module is visible, so is its metadata.
                _write_atomic(meta_path, [json.dumps(info, default=str, sort_keys=True).encode()])
                _write_atomic(path, [header, payload])
                break
            except FileNotFoundError as e:
                if attempt == 2:  # else: the directory was removed meanwhile; remake it
                    self._disable("write", e)
                    return
            except OSError as e:
                self._disable("write", e)
                return
        metrics.counter_inc("PersistentCacheWrite")
        self._evict(keep=path)

    def _evict(self, keep: Path) -> None:
        """Remove least recently used entries until the total fits."""
        entries = self._scan(clean=True)
        total = sum(e["size"] for e in entries)
        for e in sorted(entries, key=lambda e: e["last_used"]):
            if total <= self.max_bytes:
                break
            if e["path"] == keep:
                continue
            if _remove_entry(e["path"]):
                metrics.counter_inc("PersistentCacheEvict")
            total -= e["size"]  # gone either way: another process removed it

    # -- listing ---------------------------------------------------------

    def _scan(self, clean: bool = False) -> list[dict]:
        """Every entry as {key, path, size, last_used}; ``clean`` also removes
        dead writers' temporary files and metadata without a module."""
        out = []
        try:
            shards = list(os.scandir(self._modules))
        except OSError:
            return out
        now = time.time()
        for shard in shards:
            try:
                files = {f.name: f for f in os.scandir(shard.path)}
            except OSError:
                continue  # not a directory, or removed meanwhile
            for name, f in files.items():
                try:
                    if name.endswith(".vmfb") and not name.startswith(_TMP_PREFIX):
                        st = f.stat()
                        size = st.st_size
                        meta = files.get(name[:-5] + ".json")
                        if meta is not None:
                            try:
                                size += meta.stat().st_size
                            except OSError:
                                pass
                        out.append(dict(key=name[:-5], path=Path(f.path), size=size,
                                        last_used=st.st_mtime))
                    elif clean and name.startswith(_TMP_PREFIX):
                        if now - f.stat().st_mtime > _STALE_TMP_SECONDS:
                            os.unlink(f.path)
                    elif clean and name.endswith(".json") and name[:-5] + ".vmfb" not in files:
                        if now - f.stat().st_mtime > _ORPHAN_META_SECONDS:
                            os.unlink(f.path)
                except OSError:
                    continue  # vanished under us: another process evicted it
        return out

    def entries(self) -> list[dict]:
        """Entries, most recently used first: {key, size (bytes on disk),
        last_used (epoch seconds), meta (dict; empty if unreadable)}."""
        out = []
        for e in sorted(self._scan(), key=lambda e: e["last_used"], reverse=True):
            try:
                meta = json.loads(e["path"].with_suffix(".json").read_text())
                if not isinstance(meta, dict):
                    meta = {}
            except (OSError, ValueError):
                meta = {}
            out.append(dict(key=e["key"], size=e["size"], last_used=e["last_used"], meta=meta))
        return out

    def stats(self) -> dict:
        """{location, entries, total_bytes, max_bytes, enabled}."""
        entries = self._scan()
        return dict(location=str(self.root), entries=len(entries),
                    total_bytes=sum(e["size"] for e in entries),
                    max_bytes=self.max_bytes, enabled=self._enabled)

    def clear(self) -> int:
        """Remove every entry; the number removed by this call. Directories
        stay, so a concurrent ``put`` never finds its shard gone."""
        n = 0
        for e in self._scan():
            n += _remove_entry(e["path"])
        self._scan(clean=True)
        return n


def _unpack(blob: bytes) -> tuple[bytes | None, str]:
    """(payload, "") for a sound entry, else (None, what is wrong)."""
    if len(blob) < _HEADER.size:
        return None, f"truncated: {len(blob)} bytes, shorter than the header"
    magic, version, length, digest = _HEADER.unpack_from(blob)
    if magic != _MAGIC:
        return None, "bad magic"
    if version != FORMAT_VERSION:
        return None, f"format version {version}, expected {FORMAT_VERSION}"
    if len(blob) != _HEADER.size + length:
        return None, f"truncated: payload {len(blob) - _HEADER.size} bytes, expected {length}"
    payload = blob[_HEADER.size:]
    if hashlib.sha256(payload).digest() != digest:
        return None, "checksum mismatch"
    return payload, ""


def _write_atomic(path: Path, chunks) -> None:
    """Write ``chunks`` to ``path`` through a temporary file in the same
    directory, so that readers never see a partial file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX, suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
        t = time.time_ns()  # fine-grained, so LRU order is exact within a process
        os.utime(tmp, ns=(t, t))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _remove_entry(path: Path) -> bool:
    """Remove a module and its metadata; False if it was already gone."""
    try:
        os.unlink(path)
        removed = True
    except OSError:
        removed = False
    try:
        os.unlink(path.with_suffix(".json"))
    except OSError:
        pass
    return removed


class _Marked:
    """``DiskCache.compiling``: ``compiling/<key>`` holds this pid while the
    block runs; removed after it (the module stored, or the compile failed)."""

    def __init__(self, cache: DiskCache, key: str):
        self.path = cache._mark(key) if cache._enabled else None

    def __enter__(self):
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.path.write_text(str(os.getpid()))
            except OSError:
                self.path = None
        return self

    def __exit__(self, *exc):
        if self.path is not None:
            try:
                if self.path.read_text() == str(os.getpid()):
                    self.path.unlink()
            except OSError:
                pass
        return False
