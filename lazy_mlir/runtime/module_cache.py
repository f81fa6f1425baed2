"""The module cache: the loaded module that runs a graph, compiled once.

``module_for`` looks in the in-memory cache (``CachedCompile``), then in the
persistent cache on disk (``PersistentCacheHit``), and only then compiles
(``UncachedCompile``) through the one compile path,
``pipeline.compile.compile_graph``, and loads the result with
``load_module`` (the loader ``lm.jit`` shares). A graph that fails to
compile gets an ``EagerEntry`` that runs its fx module on the host; its
error and repro are logged once and the ops blamed for it are no longer
captured for compilation (decided by ``compile_graph``).
"""
from __future__ import annotations

import json
import logging

from ..graph import debug
from .. import metrics
from ..pipeline.compile import EagerEntry, compile_graph, eager_entry
from .cache import memory_cache
from .disk_cache import default_cache, make_key

log = logging.getLogger("lazy_mlir")


def module_for(graph, target, config):
    """The loaded module (or ``EagerEntry``) for ``graph`` on ``target``."""
    key = (graph.key, target.cache_key, config.key)
    entry = memory_cache.get(key)
    if entry is not None:
        metrics.counter_inc("CachedCompile")
        return entry
    from ..pipeline.dump import active_dumper
    from .session import session_for
    dumper = active_dumper()
    disk = default_cache() if dumper is None else None  # a dump wants every graph compiled
    disk_key = make_key(graph.key, target.cache_key, config.key) if disk else None
    packed = disk.get(disk_key) if disk else None
    if packed is not None:
        clobbered, passthrough, vmfb = _unpack(packed)
        entry = session_for(target).load(vmfb, clobbered, passthrough)
    else:
        metrics.counter_inc("UncachedCompile")
        debug.on_uncached_compile(graph)
        compiled = compile_graph(graph, target, config)
        entry = load_module(compiled, graph, target)
        if not isinstance(entry, EagerEntry):
            if dumper is not None:
                dumper.dump(graph, compiled.compiled, config,
                            make_key(graph.key, target.cache_key, config.key))
            if disk:
                disk.put(disk_key, _pack(compiled.clobbered, compiled.passthrough,
                                         compiled.vmfb),
                         {"graph": graph.key, "target": target.name, "ops": len(graph.nodes),
                          "config": config.key})
    memory_cache.put(key, entry)
    return entry


def load_module(result, graph, target):
    """``compile_graph``'s ``result`` loaded on ``target``'s session with its
    protections (copied ``clobbered`` arguments, ``passthrough`` results); an
    ``EagerEntry`` stays one. The one loader of mark_step and ``lm.jit``.

    IREE's runtime takes at most 32 buffers per dispatch; a graph whose
    fused dispatch reads more (a sum of 40 input tensors) compiles but cannot
    be loaded: it gets an ``EagerEntry`` that runs it on the CPU instead."""
    if isinstance(result, EagerEntry):
        return result
    from .session import session_for
    try:
        return session_for(target).load(result.vmfb, result.clobbered, result.passthrough)
    except (IndexError, RuntimeError, ValueError) as e:
        if "binding count" not in str(e):
            raise
        reason = str(e).split(";")[0].split(": ")[-1]
        log.warning("lazy-mlir: IREE cannot load this graph (%s: a dispatch reads more "
                    "buffers than the runtime allows); it runs eagerly on the CPU", reason)
        return eager_entry(graph)


def _pack(clobbered: tuple[int, ...], passthrough, vmfb: bytes) -> bytes:
    header = {"clobbered": list(clobbered), "passthrough": [list(p) for p in passthrough]}
    return json.dumps(header).encode() + b"\n" + vmfb


def _unpack(packed: bytes):
    header, _, vmfb = packed.partition(b"\n")
    header = json.loads(header)
    passthrough = tuple(tuple(p) for p in header.get("passthrough", ()))
    return tuple(header["clobbered"]), passthrough, vmfb
