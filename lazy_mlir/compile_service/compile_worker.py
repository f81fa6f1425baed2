"""A compile worker: one process that lowers and compiles graphs for the pool.

Run as ``python`` + ``COMMAND`` by ``compile_pool``
(never through ``multiprocessing``: a spawned child would run the user's
``__main__`` again). It reads jobs from stdin and writes answers to stdout,
each a frame (8-byte little-endian length, then a pickle); anything else the
compiler prints goes to stderr. A job is the graph as ``pack_fx`` made it, the
target, the ``PipelineConfig`` and where to store the module on disk; the
answer is ``("ok", CompiledGraph)`` or ``("error", kind, message, unlowered,
repro, blamed)``. A crash of torch-mlir or IREE ends this process only.

``python -c '...main(sys.argv[1:])' --repro DIR/job.pkl`` (``COMMAND``) compiles
one job written by the pool for a worker that died, in the foreground: the
command a repro names.

When its program exits with compiles unanswered, the pool lets the worker go
(``compile_pool.CompilePool.detach``): the worker finishes its job, stores
it and ends; a ``("spool", path)`` frame before the end of its input hands it
the jobs no worker had started (``--spool path``: a new worker for them),
which it stores without answering. Once its parent is gone (``_watch_parent``,
within ``PARENT_POLL_SECONDS``) its output goes to /dev/null, so a caller
reading the program's stderr to its end is not kept waiting, and each job is
bounded by ``LAZY_MLIR_COMPILE_TIMEOUT`` (SIGALRM).
"""
from __future__ import annotations

import copyreg
import io
import json
import os
import pickle
import signal
import struct
import sys
import threading
import time
import traceback

_LEN = struct.Struct("<Q")
# Test hook, read only here: "segv" or "kill" ends the worker that reads it
# mid-compile (after lowering), "sleep" makes it hang; lets CI crash a real
# worker without depending on one compiler bug staying unfixed.
_CRASH_ENV = "LAZY_MLIR_TEST_WORKER_CRASH"
# Test hook: seconds a worker waits before each compile (a compile still
# running when its program exits, without depending on the compiler's speed),
# or "until:PATH": it waits until PATH exists (at most _UNTIL_LIMIT seconds),
# an order a test sets without depending on the machine's load either.
_DELAY_ENV = "LAZY_MLIR_TEST_WORKER_DELAY"
_UNTIL_LIMIT = 300.0

PARENT_POLL_SECONDS = 0.2
PARENT_ENV = "LAZY_MLIR_COMPILE_PARENT"  # the pool's process id (it may be gone before we look)
_detached = [False]


class _NodeRef:
    """A reference to an earlier fx node, by name, in a packed graph."""

    def __init__(self, name: str):
        self.name = name


def _pack_target(target):
    schema = getattr(target, "_schema", None)
    if schema is not None:  # an OpOverload: not picklable, named instead
        ns, name = schema.name.split("::")
        return ("op", ns, name, target._overloadname)
    return ("py", target)


def _unpack_target(ref):
    import torch
    if ref[0] == "op":
        _, ns, name, overload = ref
        if ns == "lazy_mlir":  # our own ops (ops/rnn.py) exist once their module is imported
            from ..ops.registry import load_domains
            load_domains()
        return getattr(getattr(getattr(torch.ops, ns), name), overload)
    return ref[1]


def _spec(val):
    import torch
    if isinstance(val, torch.Tensor):
        return ("t", tuple(val.shape), tuple(val.stride()), val.dtype)
    if isinstance(val, (list, tuple)):
        return ("l" if isinstance(val, list) else "s", [_spec(v) for v in val])
    return None


def _unspec(spec, mode):
    import torch
    if spec is None:
        return None
    if spec[0] == "t":
        with mode:
            return torch.empty_strided(spec[1], spec[2], dtype=spec[3])
    vals = [_unspec(s, mode) for s in spec[1]]
    return vals if spec[0] == "l" else tuple(vals)


def pack_fx(gm) -> list:
    """``gm`` (``pipeline.fx_graph.to_fx``'s module) as picklable rows: the
    op as its name, node arguments as references, ``meta["val"]`` as
    (shape, stride, dtype) (torch.fx's own pickling drops the metadata the
    importer needs)."""
    import torch.fx as fx

    def ref(a):
        return _NodeRef(a.name) if isinstance(a, fx.Node) else a

    rows = [(n.op, n.name, _pack_target(n.target) if n.op == "call_function" else n.target,
             fx.node.map_aggregate(n.args, ref), fx.node.map_aggregate(n.kwargs, ref),
             _spec(n.meta.get("val")))
            for n in gm.graph.nodes]
    if gm.meta.get("size_plan") is not None:  # (compiled with dynamic dimensions)
        rows.append(("size_plan", None, gm.meta["size_plan"], (), {}, None))
    return rows


def unpack_fx(rows: list):
    """The GraphModule ``pack_fx`` packed, with fake-tensor metadata."""
    import torch
    import torch.fx as fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = fx.Graph()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    env = {}

    def deref(a):
        return env[a.name] if isinstance(a, _NodeRef) else a

    plan = None
    for op, name, target, args, kwargs, spec in rows:
        if op == "size_plan":
            plan = target
            continue
        args, kwargs = fx.node.map_aggregate(args, deref), fx.node.map_aggregate(kwargs, deref)
        if op == "placeholder":
            node = g.placeholder(target)
        elif op == "output":
            node = g.output(args[0])
        else:
            node = g.create_node(op, _unpack_target(target) if op == "call_function" else target,
                                 args, kwargs, name)
        if spec is not None:
            node.meta["val"] = _unspec(spec, mode)
        env[name] = node
    gm = fx.GraphModule(torch.nn.Module(), g)
    if plan is not None:
        gm.meta["size_plan"] = plan
    return gm


def compile_job(job: dict):
    """Lower and compile one job; store the module in the disk cache named
    by the job, marked as compiling there meanwhile (another process that
    wants it waits for it). The answer as described in the module docstring."""
    if not job.get("cache"):
        return _compile_job(job)
    from .disk_cache import DiskCache
    root, key, _ = job["cache"]
    with DiskCache(root).compiling(key):
        return _compile_job(job)


def _test_delay() -> None:
    value = os.environ.get(_DELAY_ENV)
    if not value:
        return
    if not value.startswith("until:"):
        time.sleep(float(value))
        return
    path, deadline = value[len("until:"):], time.monotonic() + _UNTIL_LIMIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def _compile_job(job: dict):
    from ..dialects.runner import PipelineError
    from ..pipeline.compile import InPlaceHazard, compile_module, lower_graph
    gm = unpack_fx(job["fx"])
    target, config = job["target"], job["config"]
    _test_delay()
    try:
        stages = lower_graph(None, target, config, gm)
        _test_crash()
        compiled = compile_module(stages, target, config)
    except InPlaceHazard as e:
        return ("error", "hazard", str(e), (), None, (e.value, tuple(e.blamed)))
    except PipelineError as e:
        return ("error", "pipeline", str(e), tuple(e.unlowered),
                str(e.repro) if e.repro else None, None)
    except Exception:  # noqa: BLE001 - a lowering bug costs this graph only
        return ("error", "exception", traceback.format_exc(), (), None, None)
    if job.get("cache"):
        store(job["cache"], compiled)
    if not job.get("stages"):  # the texts are wanted for a dump only
        compiled = _without_stages(compiled)
    return ("ok", compiled)


def store(cache, compiled) -> None:
    """``compiled`` written to the persistent cache entry ``cache`` names."""
    from .disk_cache import DiskCache
    root, key, meta = cache
    DiskCache(root).put(key, pack_entry(compiled.clobbered, compiled.passthrough,
                                        compiled.vmfb), meta)


def _without_stages(compiled):
    from dataclasses import replace
    return replace(compiled, compiled=replace(compiled.compiled, stages=()))


def _test_crash() -> None:
    how = os.environ.get(_CRASH_ENV)
    if how == "segv":
        import ctypes
        ctypes.string_at(0)  # a real SIGSEGV, as a compiler bug gives
    elif how == "kill":
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "sleep":
        import time
        time.sleep(3600)


def pack_entry(clobbered: tuple[int, ...], passthrough, vmfb: bytes) -> bytes:
    """A persistent-cache entry: a JSON line (the loader's protections),
    then the module."""
    header = {"clobbered": list(clobbered), "passthrough": [list(p) for p in passthrough]}
    return json.dumps(header).encode() + b"\n" + vmfb


def unpack_entry(packed: bytes):
    header, _, vmfb = packed.partition(b"\n")
    header = json.loads(header)
    passthrough = tuple(tuple(p) for p in header.get("passthrough", ()))
    return tuple(header["clobbered"]), passthrough, vmfb


def read_frame(f):
    head = f.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def dumps(obj) -> bytes:
    """``obj`` pickled for a worker. A ``torch.memory_format`` (a node's
    ``memory_format=`` argument) pickles as a bare name, which pickle looks
    up in the first module of ``sys.modules`` that has it, such as a user's
    ``models.py`` that imported torch: a worker (``python -P``) could not
    import that module and died on the job. Such values are named from torch
    itself here; so are ``torch.layout``s, which do not pickle at all."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    torch = sys.modules.get("torch")
    if torch is not None:
        pickler.dispatch_table = {**copyreg.dispatch_table,
                                  torch.memory_format: _reduce_torch_name,
                                  torch.layout: _reduce_torch_name}
    pickler.dump(obj)
    return buffer.getvalue()


def dump(obj, f) -> None:
    f.write(dumps(obj))


def _reduce_torch_name(value):
    return _torch_attribute, (str(value).removeprefix("torch."),)


def _torch_attribute(name: str):
    import torch
    return getattr(torch, name)


def write_frame(f, obj) -> None:
    data = dumps(obj)
    f.write(_LEN.pack(len(data)) + data)
    f.flush()


def _watch_parent(parent: int) -> None:
    """(A daemon thread) ``_detach`` once the parent process is gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_SECONDS)
    _detach()


def _detach() -> None:
    """On our own: nothing of this process's output reaches the program's
    any more, and the job running now has its time limit."""
    if not _detached[0]:
        _detached[0] = True
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
    _limit_job()


def _limit_job() -> None:
    """A let-go worker ends (SIGALRM) if its job runs past the time limit."""
    if _detached[0]:
        raw = os.environ.get("LAZY_MLIR_COMPILE_TIMEOUT", "").strip()
        try:
            seconds = float(raw) if raw else 900.0
        except ValueError:
            seconds = 900.0
        signal.alarm(max(1, int(seconds) + 1))


def store_spooled(path: str) -> int:
    """Compile and store the jobs spooled to ``path`` (then removed) whose
    modules are not in the cache yet; how many were stored."""
    from .disk_cache import DiskCache
    try:
        with open(path, "rb") as f:
            jobs = pickle.load(f)
        os.unlink(path)
    except (OSError, EOFError, pickle.UnpicklingError):
        return 0
    stored = 0
    for job in jobs:
        root, key, _ = job["cache"]
        if DiskCache(root).get(key) is not None:  # answered just before the exit
            continue
        _limit_job()
        stored += compile_job(job)[0] == "ok"
    return stored


def main(argv: list[str]) -> int:
    if argv[:1] == ["--repro"]:
        with open(argv[1], "rb") as f:
            answer = compile_job(pickle.load(f))
        print(answer[0] if answer[0] == "ok" else answer[2])
        return 0 if answer[0] == "ok" else 1
    if argv[:1] == ["--spool"]:  # started by a program exiting with no worker running
        _detach()
        store_spooled(argv[1])
        return 0
    parent_pid = int(os.environ.get(PARENT_ENV) or os.getppid())
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    # The protocol owns the original stdout; what the compiler prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    inp = os.fdopen(os.dup(0), "rb")
    # The imports (seconds), before the first job: torch-mlir and IREE's compiler.
    import iree.compiler  # noqa: F401
    from ..dialects import torch_import  # noqa: F401
    from ..pipeline import compile as _  # noqa: F401
    parent = True  # the parent still reads answers
    try:
        write_frame(out, ("ready", os.getpid()))
    except BrokenPipeError:  # the parent exited: spooled jobs may wait in the input
        parent = False
    while True:
        job = read_frame(inp)
        if job is None:  # the parent closed the pipe: it exits, or let this worker go
            return 0
        if isinstance(job, tuple) and job[0] == "spool":
            store_spooled(job[1])
            continue
        _limit_job()
        answer = compile_job(job)  # (stored before it is answered)
        if parent:
            try:
                write_frame(out, answer)
            except BrokenPipeError:  # the parent exited: the jobs left are stored only
                parent = False


COMMAND = ("-P", "-c", "import sys; from lazy_mlir.compile_service.compile_worker import main; "
                 "sys.exit(main(sys.argv[1:]))")
"""The worker's command line after ``python`` (not ``-m``: ``import
lazy_mlir`` imports this module before runpy would run it as ``__main__``,
and pickles must name the imported module's classes). ``-P``: the current
directory is not put first on ``sys.path``, so the worker imports the
parent's lazy_mlir (first on its ``PYTHONPATH``), not a checkout it is
started in."""
