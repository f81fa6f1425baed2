"""Compile or reuse: the module that runs a graph.

``module_for`` looks in the in-memory cache (``CachedCompile``), then in the
persistent cache on disk (``PersistentCacheHit``), and only then compiles
(``UncachedCompile``). A graph that fails to compile gets an ``EagerEntry``
that runs its fx module on the host; its error and repro are logged once and
the ops blamed for it are no longer captured for compilation.
"""
from __future__ import annotations

import json
import logging
import re
import time

from ..graph import debug
from .. import metrics
from .cache import memory_cache
from .disk_cache import default_cache, make_key

log = logging.getLogger("lazy_mlir")


class EagerEntry:
    """A graph that could not be compiled: run its fx module on the host."""

    seconds = None  # never timed: it runs on the worker (see LoadedModule.seconds)

    def __init__(self, gm, ops):
        self.gm = gm
        self.ops = ops


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
        compiled = _compile(graph, target, config)
        if isinstance(compiled, EagerEntry):
            entry = compiled
        else:
            clobbered = clobbered_args(compiled.stages[-2].text)
            passthrough = returned_args(compiled.stages[-2].text)
            try:
                entry = session_for(target).load(compiled.vmfb, clobbered, passthrough)
            except (IndexError, RuntimeError, ValueError) as e:
                if "binding count" not in str(e):
                    raise
                entry = _unloadable(graph, e)
                memory_cache.put(key, entry)
                return entry
            if dumper is not None:
                dumper.dump(graph, compiled, config,
                            make_key(graph.key, target.cache_key, config.key))
            if disk:
                disk.put(disk_key, _pack(clobbered, passthrough, compiled.vmfb),
                         {"graph": graph.key, "target": target.name, "ops": len(graph.nodes),
                          "config": config.key})
    memory_cache.put(key, entry)
    return entry


def _unloadable(graph, error) -> EagerEntry:
    """IREE's runtime takes at most 32 buffers per dispatch; a graph whose
    fused dispatch reads more (a sum of 40 input tensors) compiles but cannot
    be loaded. It runs eagerly on the CPU instead of failing."""
    from ..pipeline.fx_graph import to_fx
    reason = str(error).split(";")[0].split(": ")[-1]
    log.warning("lazy-mlir: IREE cannot load this graph (%s: a dispatch reads more "
                "buffers than the runtime allows); it runs eagerly on the CPU", reason)
    return EagerEntry(to_fx(graph), [n.op.__name__.split(".")[0] for n in graph.nodes])


def _compile(graph, target, config):
    from ..dialects.runner import PipelineError
    from ..pipeline.fx_graph import to_fx
    from ..pipeline.stages import compile_stages, lower
    gm = to_fx(graph)
    t0 = time.perf_counter()
    try:
        compiled = compile_stages(lower(gm, config, target.name), target, config)
        linalg = compiled.stages[-2].text
        for check, blamed in ((shared_sort_operands, _SORT_LIKE),
                              (argument_read_after_in_place_write, _IN_PLACE_LIKE)):
            value = check(linalg)
            if value:  # a wrong answer from IREE: run the graph eagerly instead
                ops = sorted({n.op.__name__.split(".")[0] for n in graph.nodes} & blamed)
                log.warning("lazy-mlir: IREE updates %s in place while another result still "
                            "reads it (%s); the graph runs eagerly on the CPU", value,
                            check.__name__)
                return EagerEntry(gm, ops or [graph.nodes[-1].op.__name__.split(".")[0]])
        return compiled
    except PipelineError as e:
        ops = list(e.unlowered)
        _deny(graph, ops, f"compile failed: {e}")
        log.warning("%s\n  the graph runs eagerly on the CPU%s", e,
                    f"; not compiled again for these argument dtypes and ranks: {', '.join(ops)}"
                    if ops else "")
        return EagerEntry(gm, sorted({o.split(".")[0] for o in ops})
                          or [n.op.__name__.split(".")[0] for n in graph.nodes])
    finally:
        metrics.add_sample("CompileTime", time.perf_counter() - t0)


def _deny(graph, ops: list[str], why: str) -> None:
    """Stop compiling the blamed ops for the argument signatures they had in
    ``graph``; an op no node of the graph is (one an import decomposition
    made) is stopped for every signature."""
    from ..ops.support import deny, deny_signature, mlir_name
    from ..graph.ir import arg_signature
    for op in ops:
        nodes = [n for n in graph.nodes if getattr(n.op, "_overloadname", None) is not None
                 and mlir_name(n.op) == op]
        for n in nodes:
            deny_signature(op, arg_signature(n.flat), why)
        if not nodes:
            deny(op, why)


def clobbered_args(text: str) -> tuple[int, ...]:
    """Function arguments that a sort-like op takes as its in-place operand."""
    found = set()
    for m in re.finditer(r"tm_tensor\.\w+[^\n]*?outs\(([^)]*)\)", text):
        found.update(int(a) for a in re.findall(r"%arg(\d+)\b", m.group(1)))
    for m in re.finditer(r"torch\.aten\.(?:sort|topk|argsort|kthvalue|median)\w*[^\n]*", text):
        found.update(int(a) for a in re.findall(r"%arg(\d+)\b", m.group(0)))
    return tuple(sorted(found))


def returned_args(text: str) -> tuple[tuple[int, int], ...]:
    """(result, argument) pairs of ``main``'s results that are its arguments
    returned unchanged. IREE may update such an argument in place for another
    result (``b = a * 1; a[2:] = x`` returns one buffer for both), so the
    runtime answers these results with the argument itself."""
    main = text.find("func.func @main(")
    ret = re.search(r"^\s*(?:func\.)?return (.*?) :", text[main:], re.M) if main >= 0 else None
    if ret is None:
        return ()
    operands = [o.strip() for o in ret.group(1).split(",")]
    return tuple((i, int(o[4:])) for i, o in enumerate(operands) if re.fullmatch(r"%arg\d+", o))


_SORT_LIKE = {"sort", "topk", "argsort", "msort", "kthvalue", "median", "nanmedian", "mode"}


def shared_sort_operands(text: str) -> str | None:
    """An SSA value that two in-place sorts (``tm_tensor.sort``/``topk``) of
    ``text`` both take as an ``outs`` operand, if any: IREE sorts it in place
    for the first and the second then reads it sorted (wrong indices from
    ``topk(x, 3, 1); topk(x, 3, 1, largest=False)`` in one graph)."""
    seen = set()
    for m in re.finditer(r"tm_tensor\.(?:sort|topk)\b[^\n]*?outs\(([^)]*?)(?::|\))", text):
        for v in re.findall(r"%[\w#]+", m.group(1)):
            if v in seen:
                return v
            seen.add(v)
    return None


_IN_PLACE_LIKE = {"slice_scatter", "select_scatter", "copy_", "index_put", "as_strided_scatter"}


def argument_read_after_in_place_write(text: str) -> str | None:
    """An argument that ``main`` inserts a slice into (IREE writes that in
    place) and also returns a view of (a reshape or slice of it, which IREE
    returns as a view of the argument's buffer): ``b = a.view(2, 3) * 1;
    a[2:] = x`` returned the updated ``a`` as ``b``. (An argument returned
    unchanged is handled by ``returned_args``; compute that reads the
    argument is ordered before the write by IREE.)"""
    main = text.find("func.func @main(")
    ret = re.search(r"^\s*(?:func\.)?return (.*?) :", text[main:], re.M) if main >= 0 else None
    if ret is None:
        return None
    body = text[main:]
    returned = {o.strip() for o in ret.group(1).split(",")}
    views = re.findall(r"(%[\w#]+) = tensor\.(?:expand_shape|collapse_shape|extract_slice) "
                       r"(%[\w#]+)\b", body)
    for arg in set(re.findall(r"tensor\.insert_slice %[\w#]+ into (%arg\d+)\[", body)):
        aliases = {arg}
        for _ in range(len(views)):  # views of views
            grown = aliases | {out for out, src in views if src in aliases}
            if grown == aliases:
                break
            aliases = grown
        if (aliases - {arg}) & returned:
            return arg
    return None


def _pack(clobbered: tuple[int, ...], passthrough, vmfb: bytes) -> bytes:
    header = {"clobbered": list(clobbered), "passthrough": [list(p) for p in passthrough]}
    return json.dumps(header).encode() + b"\n" + vmfb


def _unpack(packed: bytes):
    header, _, vmfb = packed.partition(b"\n")
    header = json.loads(header)
    passthrough = tuple(tuple(p) for p in header.get("passthrough", ()))
    return tuple(header["clobbered"]), passthrough, vmfb
