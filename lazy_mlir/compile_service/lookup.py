"""The module cache: the loaded module that runs a graph, compiled once.

``module_for`` looks in the in-memory cache (``CachedCompile``), then in the
persistent cache on disk (``PersistentCacheHit``), and only then compiles
(``UncachedCompile``) through the one compile path,
``pipeline.compile.compile_graph``, in a compile worker
(``compile_pool``; in this process with ``LAZY_MLIR_COMPILE_WORKERS=0``), and
loads the result with ``load_module`` (the loader ``lm.jit`` shares). A graph
that fails to compile gets an ``EagerEntry`` that runs its fx module on the
host; its error and repro are logged once and the ops blamed for it are no
longer captured for compilation (decided by ``compile_graph``).

In the background (the default; ``LAZY_MLIR_COMPILE=wait`` blocks instead) a
miss submits the compile and answers a ``CompilingEntry`` at once: the graph
runs eagerly on the CPU, eager PyTorch's results, not counted as a fallback
(``EagerWhileCompiling``). Each later lookup of any graph settles the
compiles that finished: the memory-cache entry becomes the loaded module (or
the failed compile's ``EagerEntry``), so the next run of that graph is
compiled. Data the eager run left on the host is copied to the device by the
compiled run that reads it (``lazy.sync._run``), for every target.
A dump (``lazy-mlir dump``) always waits: it wants every graph compiled.
"""
from __future__ import annotations

import logging

import os

from ..graph import debug
from .. import metrics
from ..pipeline.compile import EagerEntry, compile_graph, eager_entry
from ..pipeline.fx_graph import to_fx
from . import compile_pool
from .cache import memory_cache
from .compile_worker import pack_entry, unpack_entry
from .disk_cache import default_cache, make_key

log = logging.getLogger("lazy_mlir")


def background() -> bool:
    """Whether a miss compiles in the background (``LAZY_MLIR_COMPILE`` is
    not ``wait``)."""
    mode = os.environ.get("LAZY_MLIR_COMPILE", "background").strip().lower()
    if mode not in ("background", "wait", ""):
        raise ValueError(f"LAZY_MLIR_COMPILE must be 'background' or 'wait', not {mode!r}")
    return mode != "wait"


class CompilingEntry(EagerEntry):
    """A graph whose module compiles in a worker: it runs eagerly meanwhile
    (no op blamed: not a fallback). Holds the graph until settled, for the
    failure's bookkeeping (``compile_graph``)."""

    def __init__(self, gm, future, graph, target, config):
        super().__init__(gm, [])
        self.future, self.graph, self.target, self.config = future, graph, target, config


_compiling: dict[tuple, CompilingEntry] = {}


def module_for(graph, target, config):
    """The loaded module (or ``EagerEntry``) for ``graph`` on ``target``."""
    if _compiling:
        _settle_finished()
    # (the driver too: a loaded module is bound to its device; the compiled
    # one, on disk, is the same for cpu's local-task and local-sync)
    key = (graph.key, target.cache_key, target.driver, config.key)
    entry = memory_cache.get(key)
    if isinstance(entry, CompilingEntry):
        metrics.counter_inc("EagerWhileCompiling")
        return entry
    if entry is not None:
        metrics.counter_inc("CachedCompile")
        return entry
    from ..pipeline.dump import active_dumper
    dumper = active_dumper()
    disk = default_cache() if dumper is None else None  # a dump wants every graph compiled
    disk_key = make_key(graph.key, target.cache_key, config.key) if disk else None
    packed = disk.get(disk_key) if disk else None
    if packed is not None:
        clobbered, passthrough, vmfb = unpack_entry(packed)
        entry = load_or_none(target, vmfb, clobbered, passthrough, "a cached module",
                             "compiling it again", graph.on_calling_thread)
        if entry is not None:
            memory_cache.put(key, entry)
            return entry
        # (a stored module the runtime refuses: compiled again below, which
        # replaces the entry, or falls back if the new one cannot load either)
    metrics.counter_inc("UncachedCompile")
    debug.on_uncached_compile(graph)
    cache = (str(disk.root), disk_key, {"graph": graph.key, "target": target.name,
                                         "ops": len(graph.nodes), "config": config.key}
             ) if disk else None
    pool = compile_pool.pool()
    if pool is not None and dumper is None and background():
        gm = to_fx(graph)
        entry = CompilingEntry(gm, pool.submit(gm, target, config, cache), graph, target, config)
        _compiling[key] = entry
        memory_cache.put(key, entry)
        metrics.counter_inc("EagerWhileCompiling")
        return entry
    compiler = None if pool is None else _worker_compiler(cache, stages=dumper is not None)
    compiled = compile_graph(graph, target, config, compiler=compiler)
    entry = load_module(compiled, graph, target)
    if dumper is not None and not isinstance(compiled, EagerEntry):
        # (also a module IREE refuses to load: its IR is what explains why)
        dumper.dump(graph, compiled.compiled, config,
                    make_key(graph.key, target.cache_key, config.key))
    if not isinstance(entry, EagerEntry):
        if disk and pool is None:  # a worker stores its own
            disk.put(disk_key, pack_entry(compiled.clobbered, compiled.passthrough,
                                          compiled.vmfb), cache[2])
    memory_cache.put(key, entry)
    return entry


def still_compiling(graph_key: str, target, config) -> bool:
    """Whether the module of the graph of ``graph_key`` is being compiled
    in the background (a look that counts nothing, unlike ``module_for``)."""
    key = (graph_key, target.cache_key, target.driver, config.key)
    return isinstance(memory_cache.get(key), CompilingEntry)


def _worker_compiler(cache, stages: bool):
    """compile_graph's ``compiler`` hook that lowers and compiles in a worker process."""
    def compiler(gm, target, config):
        return compile_pool.compile_in_worker(gm, target, config, cache, stages=stages)
    return compiler


def compiles_in_flight() -> int:
    """Background compiles not settled yet (``CompilesInFlight``)."""
    return len(_compiling)


def compiles_running() -> int:
    """Background compiles whose worker has not answered yet (finished ones
    wait in ``_compiling`` until the next lookup settles them)."""
    return sum(not e.future.done() for e in list(_compiling.values()))


def wait_for_compiles(timeout: float | None = None) -> None:
    """Block until every background compile has finished, then settle them
    (benchmarks; a test that wants the compiled run next)."""
    import concurrent.futures
    concurrent.futures.wait([e.future for e in list(_compiling.values())], timeout)
    _settle_finished()


def _settle_finished() -> None:
    """Swap each finished background compile's memory-cache entry for its
    loaded module (or failed compile's ``EagerEntry``)."""
    for key, entry in list(_compiling.items()):
        if not entry.future.done():
            continue
        del _compiling[key]
        if memory_cache.get(key) is not entry:  # the cache was cleared meanwhile
            continue
        answer = entry.future.result()
        if answer[0] == "unavailable":  # no worker could start: compile here
            def compiler(gm, target, config):
                return compile_pool.compile_in_worker(gm, target, config)
        else:
            def compiler(gm, target, config, answer=answer):
                return compile_pool.result_of(answer)
        compiled = compile_graph(entry.graph, entry.target, entry.config, compiler=compiler,
                                 gm=entry.gm)
        memory_cache.put(key, load_module(compiled, entry.graph, entry.target))
        metrics.counter_inc("CompileSettled")


def load_module(result, graph, target):
    """``compile_graph``'s ``result`` loaded on ``target``'s session with its
    protections (copied ``clobbered`` arguments, ``passthrough`` results); an
    ``EagerEntry`` stays one. The one loader of mark_step and ``lm.jit``.

    A module that compiles but cannot be loaded (IREE's runtime takes at most
    32 buffers per dispatch, Vulkan drivers limit push constants, a damaged
    vmfb) gets an ``EagerEntry`` that runs the graph on the CPU instead, every
    op counted as a fallback, as for a failed compile: never an exception in
    the user's step."""
    if isinstance(result, EagerEntry):
        return result
    entry = load_or_none(target, result.vmfb, result.clobbered, result.passthrough,
                         "this graph", on_calling_thread=graph.on_calling_thread)
    return eager_entry(graph) if entry is None else entry


_load_warned: set[str] = set()


def load_or_none(target, vmfb: bytes, clobbered=(), passthrough=(), what: str = "a module",
                 instead: str = "it runs eagerly on the CPU", on_calling_thread: bool = False):
    """The module loaded on ``target``'s session, or None when the runtime
    refuses it (counted as ``ModuleLoadFailed``; warned once per kind of
    error). The loader ``load_module``, the disk cache and the torch.compile
    backend share."""
    from .session import session_for
    session = session_for(target)  # (no device, a refused target: the user's to fix, raised)
    try:
        return session.load(vmfb, clobbered, passthrough, on_calling_thread)
    except Exception as e:  # IREE raises RuntimeError/ValueError/IndexError by cause
        metrics.counter_inc("ModuleLoadFailed")
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        kind = f"{type(e).__name__}: {reason.split(';')[0][:200]}"
        if kind not in _load_warned:
            _load_warned.add(kind)
            log.warning("lazy-mlir: IREE cannot load %s for %s (%s); %s (counted as "
                        "ModuleLoadFailed)", what, target.name, kind, instead)
        else:
            log.debug("lazy-mlir: cannot load %s (%s)", what, kind)
        return None
