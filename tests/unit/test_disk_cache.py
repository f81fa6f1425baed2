"""The on-disk compiled-module cache: integrity, LRU, failures, processes, CLI."""
import argparse
import errno
import hashlib
import logging
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lazy_mlir import metrics
from lazy_mlir.compile_service import disk_cache as dc
from lazy_mlir.compile_service.disk_cache import DiskCache, make_key


def _key(name: str) -> str:
    return make_key(name, "cpu:llvm-cpu")


def _path(cache: DiskCache, key: str):
    return cache.root / "modules" / key[:2] / f"{key}.vmfb"


def _data(key: str, n: int = 4096) -> bytes:
    """Deterministic bytes per key, so any writer of a key writes the same."""
    block = hashlib.sha256(key.encode()).digest()
    return (block * (n // len(block) + 1))[:n]


@pytest.fixture(autouse=True)
def _fresh_metrics():
    metrics.reset()
    yield
    metrics.reset()


def test_roundtrip_and_metadata(tmp_path):
    cache = DiskCache(tmp_path / "c")
    assert not (tmp_path / "c").exists()  # nothing is created before a put
    k = _key("g1")
    assert cache.get(k) is None
    assert metrics.counter_value("PersistentCacheMiss") == 1
    cache.put(k, b"\x00module bytes\xff", {"graph": "2 ops: add, mul", "target": "cpu"})
    assert _path(cache, k).is_file()
    assert cache.get(k) == b"\x00module bytes\xff"
    assert metrics.counter_value("PersistentCacheHit") == 1
    cache.put(k, bytearray(b"replaced"))  # any bytes-like; replaces the entry
    assert cache.get(k) == b"replaced"
    cache.put(_key("empty"), b"")
    assert cache.get(_key("empty")) == b""
    [e1, e2] = cache.entries()  # most recently used first
    assert e1["key"] == _key("empty") and e2["key"] == k
    assert e2["meta"]["size"] == len(b"replaced") and e2["meta"]["key"] == k
    assert abs(e2["meta"]["created"] - time.time()) < 60
    s = cache.stats()
    assert s == dict(location=str(tmp_path / "c"), entries=2,
                     total_bytes=e1["size"] + e2["size"], max_bytes=2 << 30, enabled=True)
    with pytest.raises(ValueError, match="bad cache key"):
        cache.get("../../etc/passwd")


@pytest.mark.parametrize("damage", ["flip", "truncate", "header", "empty", "trailing"])
def test_corrupt_entry_is_detected_removed_and_rebuilt(tmp_path, damage, caplog):
    cache = DiskCache(tmp_path)
    k = _key("g")
    data = _data(k)
    cache.put(k, data)
    p = _path(cache, k)
    blob = bytearray(p.read_bytes())
    if damage == "flip":
        blob[-100] ^= 0x01  # a byte in the payload
    elif damage == "truncate":
        blob = blob[:len(blob) // 2]
    elif damage == "header":
        blob = blob[:20]
    elif damage == "empty":
        blob = b""
    else:
        blob += b"x"
    p.write_bytes(bytes(blob))
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        assert cache.get(k) is None
    assert "corrupted cache entry" in caplog.text
    assert metrics.counter_value("PersistentCacheCorrupt") == 1
    assert metrics.counter_value("PersistentCacheMiss") == 1
    assert not p.exists()
    assert cache.get(k) is None  # now an ordinary miss
    assert metrics.counter_value("PersistentCacheCorrupt") == 1
    cache.put(k, data)
    assert cache.get(k) == data


def test_lru_eviction_keeps_recently_used(tmp_path):
    cache = DiskCache(tmp_path, max_bytes=35_000)  # three 10 kB entries fit, four do not
    a, b, c, d = (_key(x) for x in "abcd")
    for k in (a, b, c):
        cache.put(k, _data(k, 10_000))
    assert cache.stats()["entries"] == 3
    assert cache.get(a) is not None  # a is now newer than b
    cache.put(d, _data(d, 10_000))
    assert cache.get(b) is None
    for k in (a, c, d):
        assert cache.get(k) == _data(k, 10_000)
    assert not _path(cache, b).with_suffix(".json").exists()  # metadata goes too
    assert metrics.counter_value("PersistentCacheEvict") == 1
    assert cache.stats()["total_bytes"] <= 35_000
    # An entry larger than the budget is kept (it is about to be used) ...
    big = _key("big")
    cache.put(big, _data(big, 50_000))
    assert cache.get(big) is not None and cache.stats()["entries"] == 1
    # ... until the next put.
    cache.put(a, _data(a, 10_000))
    assert cache.get(big) is None and cache.get(a) is not None


def test_cleans_dead_writers_files(tmp_path):
    cache = DiskCache(tmp_path)
    k = _key("x")
    cache.put(k, b"x")
    shard = _path(cache, k).parent
    old = time.time() - 2 * 3600
    for name in (".tmp-dead.vmfb", "0" * 64 + ".json", ".tmp-new.vmfb"):
        (shard / name).write_bytes(b"junk")
        if "new" not in name:
            os.utime(shard / name, (old, old))
    cache.put(_key("y"), b"y")
    assert sorted(p.name for p in shard.iterdir() if p.name.startswith(".tmp-")) == [".tmp-new.vmfb"]
    assert not (shard / ("0" * 64 + ".json")).exists()
    assert cache.get(k) == b"x"


def test_unwritable_root_warns_once_and_continues(tmp_path, caplog):
    root = tmp_path / "not-a-dir"
    root.write_text("a regular file")  # chmod does not stop root; a file does
    cache = DiskCache(root)
    k = _key("g")
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        assert cache.get(k) is None
        cache.put(k, b"data")
        cache.put(_key("h"), b"data")
        assert cache.get(k) is None
    warnings = [r for r in caplog.records if r.name == "lazy_mlir"]
    assert len(warnings) == 1 and "continuing without it" in warnings[0].getMessage()
    assert cache.stats()["enabled"] is False and cache.stats()["entries"] == 0
    assert cache.entries() == [] and cache.clear() == 0
    assert root.read_text() == "a regular file"


def test_full_disk_warns_once_and_leaves_no_partial_files(tmp_path, caplog, monkeypatch):
    cache = DiskCache(tmp_path)
    k = _key("g")
    cache.put(k, b"kept")
    real_fdopen = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, b):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dc.os, "fdopen", lambda fd, mode: Full(real_fdopen(fd, mode)))
    with caplog.at_level(logging.WARNING, logger="lazy_mlir"):
        cache.put(_key("h"), b"lost")
        cache.put(_key("i"), b"lost")
    assert len([r for r in caplog.records if "No space left" in r.getMessage()]) == 1
    assert cache.get(k) is None and not cache.enabled  # persistence is off
    names = [p.name for p in (tmp_path / "modules").rglob("*")]
    assert not [n for n in names if n.startswith(".tmp-")]
    assert DiskCache(tmp_path).get(k) == b"kept"  # the entry itself is intact


def test_keys_differ_when_any_component_differs(monkeypatch):
    base = make_key("g", "t", "c")
    assert len(base) == 64 and int(base, 16) >= 0
    assert base == make_key("g", "t", "c") == DiskCache.make_key("g", "t", "c")
    assert make_key("g", "t") == make_key("g", "t", "")
    others = {make_key("g2", "t", "c"), make_key("g", "t2", "c"), make_key("g", "t", "c2"),
              make_key("gt", "", "c"), make_key("", "gt", "c")}
    versions = dc.package_versions()
    assert set(versions) == {"torch", "torch-mlir", "iree-base-compiler",
                             "iree-base-runtime", "lazy-mlir"}
    for name in versions:
        changed = dict(versions, **{name: "0.0.0-other"})
        monkeypatch.setattr(dc, "package_versions", lambda changed=changed: changed)
        others.add(make_key("g", "t", "c"))
    monkeypatch.setattr(dc, "package_versions", lambda: versions)
    host = dc.host_key
    monkeypatch.setattr(dc, "host_key", lambda: "another-cpu")
    others.add(make_key("g", "t", "c"))
    monkeypatch.setattr(dc, "host_key", host)
    source = dc.compiler_source_key
    monkeypatch.setattr(dc, "compiler_source_key", lambda: "edited-decompositions")
    others.add(make_key("g", "t", "c"))
    monkeypatch.setattr(dc, "compiler_source_key", source)
    assert make_key("g", "t", "c") == base
    monkeypatch.setattr(dc, "FORMAT_VERSION", dc.FORMAT_VERSION + 1)
    others.add(make_key("g", "t", "c"))
    assert len(others) == 5 + len(versions) + 3 and base not in others


def test_compiler_source_key_follows_the_lowering_sources(tmp_path, monkeypatch):
    """The key hashes the files of dialects/, passes/, pipeline/ and runtime/:
    an edited decomposition must not be answered with an old module."""
    import shutil
    root = tmp_path / "lazy_mlir"
    pkg = Path(dc.__file__).resolve().parent.parent
    for d in dc._COMPILER_DIRS:
        shutil.copytree(pkg / d, root / d)
    (root / "tools").mkdir()
    monkeypatch.setattr(dc, "__file__", str(root / "compile_service" / "disk_cache.py"))
    key = dc.compiler_source_key.__wrapped__
    before = key()
    assert key() == before  # same sources, same key
    (root / "tools" / "cli.py").write_text("# not compiler code\n")
    assert key() == before
    with open(root / "dialects" / "decompositions.py", "a") as f:
        f.write("\n# a fix\n")
    assert key() != before


def test_unknown_package_version(monkeypatch):
    dc.package_versions.cache_clear()

    def missing(name):
        raise dc.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(dc.importlib.metadata, "version", missing)
    try:
        assert set(dc.package_versions().values()) == {"unknown"}
    finally:
        dc.package_versions.cache_clear()


def test_environment(monkeypatch, tmp_path):
    for var in ("LAZY_MLIR_CACHE", "LAZY_MLIR_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert dc.default_cache_dir() == tmp_path / "home" / ".cache" / "lazy-mlir"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert dc.default_cache_dir() == tmp_path / "home" / ".cache" / "lazy-mlir"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert dc.default_cache().root == tmp_path / "xdg" / "lazy-mlir"
    monkeypatch.setenv("LAZY_MLIR_CACHE_DIR", str(tmp_path / "explicit"))
    cache = dc.default_cache()
    assert cache.root == tmp_path / "explicit" and dc.default_cache() is cache
    for off in ("0", "false", "OFF"):
        monkeypatch.setenv("LAZY_MLIR_CACHE", off)
        assert dc.default_cache() is None and not dc.cache_enabled()
    monkeypatch.setenv("LAZY_MLIR_CACHE", "1")
    assert dc.default_cache() is cache


# -- several processes on one directory ------------------------------------

SHARED = [f"shared{i}" for i in range(6)]


def _worker(root: str, wid: int, max_bytes: int, rounds: int) -> None:
    """Write and read shared and own keys; exit non-zero on any wrong byte."""
    metrics.reset()
    cache = DiskCache(root, max_bytes=max_bytes)
    own = [f"w{wid}-{i}" for i in range(4)]
    names = SHARED + own
    sizes = {n: 20_000 + 7_000 * (sum(map(ord, n)) % 10) for n in names}
    bad = 0
    for r in range(rounds):
        for n in names[r % 3::2] + names:
            k = _key(n)
            got = cache.get(k)
            if got is not None and got != _data(k, sizes[n]):
                bad += 1
            if got is None or n in own:
                cache.put(k, _data(k, sizes[n]), {"graph": n, "target": "cpu"})
    if max_bytes >= 1 << 30:  # nothing evicted: everything must read back
        for n in names:
            k = _key(n)
            bad += cache.get(k) != _data(k, sizes[n])
    bad += metrics.counter_value("PersistentCacheCorrupt")
    bad += not cache.enabled
    os._exit(1 if bad else 0)


def _run_workers(root, max_bytes, rounds=6):
    ctx = multiprocessing.get_context("fork")  # the children inherit the imports
    procs = [ctx.Process(target=_worker, args=(str(root), i, max_bytes, rounds))
             for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return [p.exitcode for p in procs]


def test_concurrent_processes_read_back_correct_data(tmp_path):
    assert _run_workers(tmp_path, 2 << 30) == [0, 0, 0, 0]
    cache = DiskCache(tmp_path)
    assert cache.stats()["entries"] == len(SHARED) + 4 * 4
    for e in cache.entries():
        assert cache.get(e["key"]) is not None
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_concurrent_processes_with_eviction_races(tmp_path):
    # A budget of a few entries: processes evict each other's files mid-read.
    assert _run_workers(tmp_path, 150_000) == [0, 0, 0, 0]
    cache = DiskCache(tmp_path, max_bytes=150_000)
    for e in cache.entries():
        assert cache.get(e["key"]) is not None
    assert metrics.counter_value("PersistentCacheCorrupt") == 0


# -- the command line ---------------------------------------------------------

def _cli(argv, capsys):
    from lazy_mlir.tools.cache_cmd import add_parser
    parser = argparse.ArgumentParser(prog="lazy-mlir")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_cli_stats_list_clear(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("LAZY_MLIR_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LAZY_MLIR_CACHE", raising=False)
    cache = DiskCache(tmp_path)
    k1, k2 = _key("one"), _key("two")
    cache.put(k1, _data(k1, 3000), {"graph": "3 ops: addmm, relu, sum", "target": "cpu"})
    cache.put(k2, _data(k2, 5000), {"graph": "1 op: add", "target": "cpu"})

    out = _cli(["cache", "stats"], capsys)
    assert str(tmp_path) in out and "entries" in out and "2" in out and "GiB" in out
    assert "yes" in out
    out = _cli(["cache"], capsys)  # stats is the default
    assert str(tmp_path) in out
    out = _cli(["cache", "list"], capsys)
    assert k1[:12] in out and k2[:12] in out and "addmm, relu, sum" in out and "cpu" in out
    assert out.index(k2[:12]) < out.index(k1[:12])  # most recently used first
    out = _cli(["cache", "list", "--limit", "1"], capsys)
    assert k2[:12] in out and k1[:12] not in out and "1 more" in out

    other = tmp_path / "other"
    out = _cli(["cache", "list", "--cache-dir", str(other)], capsys)
    assert "no cached modules" in out
    monkeypatch.setenv("LAZY_MLIR_CACHE", "0")
    out = _cli(["cache", "--cache-dir", str(tmp_path), "stats"], capsys)
    assert "LAZY_MLIR_CACHE=0" in out

    out = _cli(["cache", "clear"], capsys)
    assert "removed 2 cached modules" in out
    assert DiskCache(tmp_path).stats()["entries"] == 0
    assert "removed 0 cached modules" in _cli(["cache", "clear"], capsys)


def test_compile_marks_are_seen_by_other_processes_only_while_alive(tmp_path):
    cache, key = DiskCache(tmp_path), make_key("g", "t", "c")
    with cache.compiling(key):  # this process's own mark: not "elsewhere"
        assert (tmp_path / "compiling" / key).read_text() == str(os.getpid())
        assert not cache.compiling_elsewhere(key)
    assert not (tmp_path / "compiling" / key).exists()
    mark = tmp_path / "compiling" / key
    mark.write_text(str(os.getppid()))  # a live process (the parent)
    assert cache.compiling_elsewhere(key)
    old = time.time() - dc.STALE_MARK_SECONDS - 1
    os.utime(mark, (old, old))
    assert not cache.compiling_elsewhere(key)  # its compiler died long ago
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mark.write_text(str(dead.pid))
    assert not cache.compiling_elsewhere(key)
