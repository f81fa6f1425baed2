"""The one lookup-or-compile entry: ``executable_for(graph, target, config)``.

Every way in calls it: mark_step and ``compile_train_step`` (``lazy.sync``),
``lm.jit`` (``load_executable``), and the Dynamo backend
(``frontends.aot_graph``, whose aot graphs come as ``AotProgram``s). It looks
in the in-memory cache (``CachedCompile``), then in the persistent cache on
disk (``PersistentCacheHit``), and only then compiles (``UncachedCompile``)
through the one compile path, ``pipeline.compile.compile_graph``, in a
compile worker (``compile_pool``; in this process with
``LAZY_MLIR_COMPILE_WORKERS=0``), and loads the result
(``load_executable``). A graph that fails to compile or load gets an
``EagerExecutable`` that runs its fx module on the host
(``executable.compile_or_fallback``).

What it needs of ``graph`` (a ``program.Graph``, or the Dynamo backend's
``AotProgram``): ``key`` (structural, sha256), ``nodes`` (each with ``op``:
the ops blamed for a failure), ``on_calling_thread``, and for a dump
``inputs`` and ``outputs``; optionally ``fx_module`` (the fx module to
compile, else ``to_fx(graph)``), ``fallback(error)`` (its own
``EagerExecutable`` for a failed compile, else ``fallback_for``'s) and
``in_worker`` (False: it cannot be sent to a worker, so never compiles in
the background).

A loaded module is also kept under its fx module's content key
(``fx_key``): the lazy device and the Dynamo backend, which key one
computation differently, share it (compiled in this process; a module from
disk is found by its own way in's key).

A compile in flight in another process (its mark in the cache directory)
is awaited, not repeated (``CompileAwaitedElsewhere``): a program run twice
in a row takes the first run's modules from its orphaned workers.

In the background (the default; ``LAZY_MLIR_COMPILE=wait`` or ``wait=True``
blocks instead) a miss submits the compile and answers a
``CompilingExecutable`` at once: the graph runs eagerly on the CPU, eager
PyTorch's results, not counted as a fallback (``EagerWhileCompiling``). Each
later lookup of any graph settles the compiles that finished: the
memory-cache entry becomes the loaded module (or the failed compile's
``EagerExecutable``), so the next run of that graph is compiled. A dump
(``lazy-mlir dump``) always waits: it wants every graph compiled.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import threading
import time

from .. import metrics
from ..pipeline.eager_graph import eager_runner
from ..graph import debug
from ..graph.program import Graph
from . import compile_pool
from .compile_worker import pack_entry, unpack_entry
from .disk_cache import default_cache, make_key
from .executable import (CompilingExecutable, EagerExecutable, compile_or_fallback,
                         LOADED, eager_executable, fallback_for, fx_module_of)
from .fx_key import fx_content_key
from .memory_cache import memory_cache
from . import first_sight, size_families
from .size_families import dynamic_executable

log = logging.getLogger("lazy_mlir")


def background() -> bool:
    """Whether a miss compiles in the background (``LAZY_MLIR_COMPILE`` is
    not ``wait``)."""
    mode = os.environ.get("LAZY_MLIR_COMPILE", "background").strip().lower()
    if mode not in ("background", "wait", ""):
        raise ValueError(f"LAZY_MLIR_COMPILE must be 'background' or 'wait', not {mode!r}")
    return mode != "wait"


_compiling: dict[tuple, CompilingExecutable] = {}
_MARK_POLL_SECONDS = 0.2  # how often a compile awaited in another process is looked for


def memory_key(graph_key: str, target, config) -> tuple:
    """The in-memory cache's key (the driver too: a loaded module is bound to
    its device; the compiled one, on disk, is the same for cpu's local-task
    and local-sync)."""
    return (graph_key, target.cache_key, target.driver, config.key)


def executable_for(graph, target, config, *, wait: bool | None = None):
    """The ``Executable`` of ``graph`` on ``target``: loaded, compiling
    (runs eagerly meanwhile) or failed (runs eagerly). ``wait``: compile
    before answering (default: unless ``background()``)."""
    if _compiling:
        _settle_finished()
    key = memory_key(graph.key, target, config)
    entry = memory_cache.get(key)
    if first_sight._unused and entry is not None:
        first_sight.looked_up(key)
    if isinstance(entry, CompilingExecutable):
        if not wait:
            metrics.counter_inc("EagerWhileCompiling")
            return entry
        wait_for_compiles()
        entry = memory_cache.get(key)
    if entry is not None:
        metrics.counter_inc("CachedCompile")
        return entry
    from ..pipeline.dump import active_dumper
    dumper = active_dumper()
    disk = default_cache() if dumper is None else None  # a dump wants every graph compiled
    disk_key = make_key(graph.key, target.cache_key, config.key) if disk else None
    entry = _from_disk(graph, target, disk, disk_key)
    if entry is not None:
        memory_cache.put(key, entry)
        size_families.note(graph, lambda: fx_module_of(graph), target, config)
        return entry
    return _miss(graph, target, config, key, disk, disk_key, dumper,
                 background() if wait is None else not wait)


def _from_disk(graph, target, disk, disk_key):
    """The module stored under ``disk_key``, loaded; None on a miss, or for a
    stored module the runtime refuses (compiled again, which replaces the
    entry, or falls back if the new one cannot load either)."""
    packed = disk.get(disk_key) if disk else None
    if packed is None:
        return None
    clobbered, passthrough, vmfb = unpack_entry(packed)
    return load_or_none(target, vmfb, clobbered, passthrough, "a cached module",
                        "compiling it again", graph.on_calling_thread)


def _miss(graph, target, config, key, disk, disk_key, dumper, in_background: bool):
    """A graph in neither cache: the module another way in loaded for the
    same fx module, the one another process is compiling, or a compile; in
    a storm of graphs that never recur, its first sight runs eagerly."""
    if in_background and dumper is None and first_sight.defer(key):
        runner = eager_runner(graph) if isinstance(graph, Graph) else fx_module_of(graph)
        return first_sight.FirstSightExecutable(runner)  # (not cached: its second sight compiles)
    try:
        gm = fx_module_of(graph)
        in_worker = getattr(graph, "in_worker", True)
    except Exception as e:  # (an aot graph that cannot be traced again)
        metrics.counter_inc("UncachedCompile")
        entry = fallback_for(graph, e, None)
        memory_cache.put(key, entry)
        return entry
    content = fx_content_key(gm) if dumper is None else None  # (a dump: every way in's own)
    shared_key = memory_key("fx:" + content, target, config) if content else None
    entry = memory_cache.get(shared_key) if shared_key else None
    if entry is not None:  # the same module, loaded for another way in
        metrics.counter_inc("CachedCompile")
        memory_cache.put(key, entry)
        return entry
    if in_worker:  # (every way in: a captured graph, an aot graph of the Dynamo backend)
        answer = dynamic_executable(graph, gm, target, config, key, lambda gm, dyn_key: (
            _plan_executable(graph, gm, dyn_key, target, config, dumper, in_background)))
        if answer is not None:
            if answer.cache:
                memory_cache.put(key, answer.entry)
            return answer.entry
    job = (graph, target, config, shared_key)
    if disk is not None and disk.compiling_elsewhere(disk_key):
        entry = _awaited(job, gm, key, disk, disk_key, in_background)
        if entry is None:  # (waited for it)
            entry = _from_disk(graph, target, disk, disk_key)
        if entry is not None:
            _put(key, entry, shared_key)
            return entry
    metrics.counter_inc("UncachedCompile")
    if isinstance(graph, Graph):  # (a recompile explained: a captured graph's nodes)
        debug.on_uncached_compile(graph)
    entry = _compile(job, gm, in_worker, key, disk, disk_key, dumper, in_background)
    if in_background:
        first_sight.compiled(key)
    _put(key, entry, shared_key)
    return entry


def _plan_executable(graph, gm, dyn_key: str, target, config, dumper, in_background: bool):
    """(the executable, its memory key) of a module with dynamic dimensions
    (``size_families``): from the caches, else compiled; the ops of a
    failed one are not blamed (its sizes compile static instead)."""
    key = memory_key(dyn_key, target, config)
    entry = memory_cache.get(key)
    if entry is not None:
        return entry, key
    disk = default_cache() if dumper is None else None
    disk_key = make_key(dyn_key, target.cache_key, config.key) if disk else None
    plan_graph = PlanGraph(graph, dyn_key, gm)
    entry = _from_disk(plan_graph, target, disk, disk_key)
    if entry is None:
        metrics.counter_inc("UncachedCompile")
        if isinstance(graph, Graph):  # (a recompile explained, as for a static one)
            debug.on_uncached_compile(graph)
        entry = _compile((plan_graph, target, config, None), gm, True, key, disk, disk_key,
                         dumper, in_background)
    if entry.state == LOADED:
        entry.dynamic_dims = True  # (its results' shapes are checked: lazy.sync)
    memory_cache.put(key, entry)
    return entry, key


class PlanGraph:
    """The graph a dynamic module is compiled from, as the compile service
    sees it: the graph that made its plan, keyed by the plan; a failed
    compile runs eagerly without blaming any op (``fallback``)."""

    def __init__(self, graph, key: str, gm):
        self.nodes, self.inputs, self.outputs = graph.nodes, graph.inputs, graph.outputs
        self.on_calling_thread = graph.on_calling_thread
        self.key = key
        self.gm = gm

    def fallback(self, error):
        log.warning("lazy-mlir: a module with dynamic dimensions failed (%s); its sizes "
                    "compile one module each", str(error).strip().splitlines()[0][:300])
        metrics.counter_inc("DynamicShapeFailed")
        return EagerExecutable(self.gm, [])


def _awaited(job, gm, key, disk, disk_key, in_background: bool):
    """A graph another process is compiling now (its mark in the cache
    directory, ``DiskCache.compiling``): its module is awaited instead of
    compiled again. In the background a ``CompilingExecutable`` whose answer
    comes when the mark goes (then settled from the disk); else None once
    the mark is gone."""
    metrics.counter_inc("CompileAwaitedElsewhere")
    future = concurrent.futures.Future()

    def watch():
        while disk.compiling_elsewhere(disk_key):
            time.sleep(_MARK_POLL_SECONDS)
        future.set_result(("elsewhere", disk_key))
    threading.Thread(target=watch, name="lazy-mlir-awaited-compile", daemon=True).start()
    if not in_background:
        future.result()
        return None
    entry = CompilingExecutable(gm, future, job)
    _compiling[key] = entry
    metrics.counter_inc("EagerWhileCompiling")
    return entry


def _put(key, entry, shared_key) -> None:
    """``entry`` under its graph's key, and a loaded module also under its fx
    module's content key (``fx_key``): another way in to the same
    computation finds it there."""
    memory_cache.put(key, entry)
    if shared_key is not None and entry.state == LOADED:
        memory_cache.put(shared_key, entry)


def _compile(job, gm, in_worker: bool, key, disk, disk_key, dumper, in_background: bool):
    """A miss: a ``CompilingExecutable`` (submitted to a worker), or the
    loaded module (or ``EagerExecutable``), compiled now."""
    graph, target, config, _ = job
    cache = (str(disk.root), disk_key, {"graph": graph.key, "target": target.name,
                                         "ops": len(graph.nodes), "config": config.key}
             ) if disk else None
    pool = compile_pool.pool() if in_worker else None
    if pool is not None and dumper is None and in_background:
        entry = CompilingExecutable(gm, pool.submit(gm, target, config, cache), job)
        _compiling[key] = entry
        metrics.counter_inc("EagerWhileCompiling")
        return entry
    compiler = None if pool is None else _worker_compiler(cache, stages=dumper is not None)
    with disk.compiling(disk_key) if disk and pool is None else contextlib.nullcontext():
        compiled = compile_or_fallback(graph, target, config, compiler=compiler, gm=gm)
    entry = load_executable(compiled, graph, target)
    if dumper is not None and not isinstance(compiled, EagerExecutable):
        # (also a module IREE refuses to load: its IR is what explains why)
        dumper.dump(graph, compiled.compiled, config,
                    make_key(graph.key, target.cache_key, config.key))
    if not isinstance(entry, EagerExecutable) and disk and pool is None:
        # (a worker stores its own)
        disk.put(disk_key, pack_entry(compiled.clobbered, compiled.passthrough,
                                      compiled.vmfb), cache[2])
    return entry


def still_compiling(graph_key: str, target, config) -> bool:
    """Whether the module of the graph of ``graph_key`` is being compiled
    in the background (a look that counts nothing, unlike ``executable_for``)."""
    return isinstance(memory_cache.get(memory_key(graph_key, target, config)),
                      CompilingExecutable)


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
    loaded module (or failed compile's ``EagerExecutable``)."""
    for key, entry in list(_compiling.items()):
        if not entry.future.done():
            continue
        del _compiling[key]
        if memory_cache.get(key) is not entry:  # the cache was cleared meanwhile
            continue
        graph, target, config, shared_key = entry.job
        answer = entry.future.result()
        if answer[0] == "elsewhere":
            _put(key, _settle_awaited(entry, key, answer[1]), shared_key)
            continue
        if answer[0] == "unavailable":  # no worker could start: compile here
            def compiler(gm, target, config):
                return compile_pool.compile_in_worker(gm, target, config)
        else:
            def compiler(gm, target, config, answer=answer):
                return compile_pool.result_of(answer)
        compiled = compile_or_fallback(graph, target, config, compiler=compiler, gm=entry.gm)
        loaded = load_executable(compiled, graph, target)
        if isinstance(graph, PlanGraph) and loaded.state == LOADED:
            loaded.dynamic_dims = True  # (its results' shapes are checked: lazy.sync)
        _put(key, loaded, shared_key)
        metrics.counter_inc("CompileSettled")


def _settle_awaited(entry: CompilingExecutable, key, disk_key):
    """The module another process compiled for ``entry``, from the disk; a
    compile here where that one failed or its process died."""
    graph, target, config, _ = entry.job
    disk = default_cache()
    loaded = _from_disk(graph, target, disk, disk_key)
    if loaded is not None:
        metrics.counter_inc("CompileSettled")
        return loaded
    metrics.counter_inc("UncachedCompile")
    return _compile(entry.job, entry.gm, getattr(graph, "in_worker", True), key, disk,
                    disk_key, None, in_background=True)


def load_executable(result, graph, target):
    """``compile_or_fallback``'s ``result`` loaded on ``target``'s session
    with its protections (copied ``clobbered`` arguments, ``passthrough``
    results); an ``EagerExecutable`` stays one. The one loader of every way in.

    A module that compiles but cannot be loaded (IREE's runtime takes at most
    32 buffers per dispatch, Vulkan drivers limit push constants, a damaged
    vmfb) gets an ``EagerExecutable`` that runs the graph on the CPU instead,
    every op counted as a fallback, as for a failed compile: never an
    exception in the user's step."""
    if isinstance(result, EagerExecutable):
        return result
    entry = load_or_none(target, result.vmfb, result.clobbered, result.passthrough,
                         "this graph", on_calling_thread=graph.on_calling_thread)
    return eager_executable(graph) if entry is None else entry


_load_warned: set[str] = set()


def load_or_none(target, vmfb: bytes, clobbered=(), passthrough=(), what: str = "a module",
                 instead: str = "it runs eagerly on the CPU", on_calling_thread: bool = False):
    """The module loaded on ``target``'s session, or None when the runtime
    refuses it (counted as ``ModuleLoadFailed``; warned once per kind of
    error)."""
    from ..runtime.session import session_for
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
