"""Compile workers: lowering and iree-compile in separate processes.

A compiler crash inside torch-mlir's C API or IREE is a segfault of the
process that runs it; here that process is a worker, so it costs one graph:
the graph's compile raises ``CompilerCrash`` (a ``PipelineError``, so
``compile_graph`` runs the graph eagerly as any failed compile, counted, with
a repro and the command that compiles it again in the foreground), the worker
is replaced at the next job, and the program goes on. A compile past its
time limit is treated the same way (the worker is killed).

- ``LAZY_MLIR_COMPILE_WORKERS``: the number of workers (default: the cores
  this process may use, at most 4); 0 compiles in this process.
- ``LAZY_MLIR_COMPILE_TIMEOUT``: seconds one compile may take (default 900;
  the largest compile measured, GPT-2's 953-op graph, took 41 s).

Workers start at the first compile (an import of torch, torch-mlir and IREE:
seconds) and are plain ``python`` processes (``compile_worker.COMMAND``)
talking over pipes: not ``multiprocessing``, whose spawned children run the
user's ``__main__`` again, and never a fork of a process with torch threads. Where one cannot start, ``pool()`` is None from then on and compiles
run in this process, with one warning. Each worker stores its modules in the
persistent cache (``disk_cache``), so a second process compiles nothing.

A process that exits with compiles unanswered (a short script, a benchmark
that stops after warm-up) leaves them to finish (``CompilePool.detach``, run
at exit): a worker compiling a graph for the persistent cache is not killed
but let go, and stores the module itself; the graphs no worker had started
go to one of the workers through a spool file (or to a new worker process).
Once this process is gone a let-go worker's output goes to /dev/null (a
caller reading the program's output to its end is not kept waiting); it
ends after its last job, never runs a job longer than
``LAZY_MLIR_COMPILE_TIMEOUT``, and its crash costs those modules only.
Compiles whose module would not be stored (no persistent cache) are killed
as before.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import logging
import os
import pickle
import queue
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path

from ..dialects.runner import PipelineError, repro_dir
from ..pipeline.compile import CompiledGraph, InPlaceHazard
from .compile_worker import COMMAND, PARENT_ENV, dump, pack_fx, read_frame, write_frame

log = logging.getLogger("lazy_mlir")

DEFAULT_TIMEOUT_SECONDS = 900.0
START_TIMEOUT_SECONDS = 300.0  # imports on a loaded 2-core machine


class CompilerCrash(PipelineError):
    """The worker compiling a graph died (a signal, out of memory) or ran
    past the time limit."""


class WorkerUnavailable(RuntimeError):
    """A worker process could not be started."""


class _Detached(Exception):
    """The pool was let go (the process exits) before a job reached a worker."""


def worker_count() -> int:
    """``LAZY_MLIR_COMPILE_WORKERS``, else the usable cores (at most 4)."""
    raw = os.environ.get("LAZY_MLIR_COMPILE_WORKERS", "").strip()
    if raw:
        try:
            return max(0, int(raw))
        except ValueError:
            raise ValueError(f"LAZY_MLIR_COMPILE_WORKERS must be a number of processes "
                             f"(0: compile in this process), not {raw!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def timeout_seconds() -> float:
    raw = os.environ.get("LAZY_MLIR_COMPILE_TIMEOUT", "").strip()
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT_SECONDS
    except ValueError:
        raise ValueError(f"LAZY_MLIR_COMPILE_TIMEOUT must be seconds, not {raw!r}") from None


def _worker_env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # this lazy_mlir, not another install
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "")
                                                  .split(os.pathsep) if p])
    env[PARENT_ENV] = str(os.getpid())
    return env


class _Worker:
    """One worker process; used by one pool thread at a time."""

    def __init__(self, wait: bool = True):
        """Start the process; with ``wait``, ``wait_ready`` too."""
        self.job: dict | None = None  # the job written to it and not answered yet
        self.send_lock = threading.Lock()  # a job is written, or the worker let go
        try:
            self.proc = subprocess.Popen(
                [sys.executable, *COMMAND],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_worker_env())
        except OSError as e:
            raise WorkerUnavailable(str(e)) from e
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait for the worker's imports; ``WorkerUnavailable`` if it fails."""
        hello = self._answer(START_TIMEOUT_SECONDS)
        if not (isinstance(hello, tuple) and hello[0] == "ready"):
            self.stop()
            raise WorkerUnavailable(f"the worker did not start ({self._death(hello)})")

    def _answer(self, seconds: float):
        """The next frame, None if the worker died, "timeout" past ``seconds``."""
        ready, _, _ = select.select([self.proc.stdout], [], [], seconds)
        if not ready:
            return "timeout"
        try:
            return read_frame(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            return None

    def _death(self, answer) -> str:
        if answer == "timeout":
            return "no answer in time"
        code = self.proc.wait()
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit status {code}"

    def compile(self, job: dict, seconds: float, pool: "CompilePool"):
        """The worker's answer to ``job``; raises ``CompilerCrash`` (and the
        worker is dead) if it died or passed ``seconds``, ``_Detached`` if
        ``pool`` was let go before the job was sent."""
        with self.send_lock:
            if pool.closed:
                raise _Detached()
            self.job = job
            try:
                write_frame(self.proc.stdin, job)
            except (BrokenPipeError, OSError):
                answer = None
            else:
                answer = False
        if answer is False:
            answer = self._answer(seconds)
        self.job = None
        if isinstance(answer, tuple):
            return answer
        if answer == "timeout":
            self.stop()
            why = f"the compile took more than {seconds:g} s (LAZY_MLIR_COMPILE_TIMEOUT)"
        else:
            why = f"the compile worker died ({self._death(answer)})"
        raise CompilerCrash(why, None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def let_go(self, spool: str | None = None) -> None:
        """At exit: the worker finishes its job (and the jobs in ``spool``),
        storing the modules, then ends on its own (its input ends here)."""
        try:
            if spool is not None:
                write_frame(self.proc.stdin, ("spool", spool))  # a few bytes: never blocks
            self.proc.stdin.close()
        except OSError as e:  # (it died meanwhile)
            log.debug("lazy-mlir: cannot let the compile worker go: %s", e)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


_SHUT_DOWN = ("unavailable", "the pool was shut down")


class CompilePool:
    """``size`` workers, each run by a thread taking jobs in submission order."""

    def __init__(self, size: int):
        self.size = size
        self.unavailable: str | None = None  # why workers cannot start, once seen
        self._jobs: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._unanswered: dict[int, dict] = {}  # id(future) -> its job
        self.in_flight = 0
        self.closed = False

    def submit(self, gm, target, config, cache=None, stages: bool = False
               ) -> concurrent.futures.Future:
        """Compile ``gm`` (``to_fx``'s module) for ``target``; the future's
        result is an answer for ``result_of``. ``cache``: (root, key, meta)
        of the persistent cache entry the worker writes."""
        job = dict(fx=pack_fx(gm), target=target, config=config, cache=cache, stages=stages)
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            self.in_flight += 1
            self._unanswered[id(future)] = job
            if len(self._threads) < self.size and len(self._threads) < self.in_flight:
                t = threading.Thread(target=self._serve, name="lazy-mlir-compile", daemon=True)
                self._threads.append(t)
                t.start()
        self._jobs.put((job, future))
        if self.closed:  # (no thread may be left to take it)
            self._answer_queued()
        return future

    def _serve(self) -> None:
        """Answer jobs in turn. Every job taken is answered, even on a pool
        shut down under it: a future left unset would hang ``wait_for_compiles``
        for good (a test's ``reset`` during a background compile did)."""
        worker = None
        while True:
            job, future = self._jobs.get()
            try:
                if worker is None or not worker.alive():
                    worker = self._start()
                answer = worker.compile(job, timeout_seconds(), self)
            except _Detached:  # the job was spooled by ``detach``
                answer = _SHUT_DOWN
            except WorkerUnavailable as e:
                answer = ("unavailable", str(e))
            except CompilerCrash as e:
                answer = _SHUT_DOWN if self.closed else (
                    "error", "crash", *_crash_repro(e, job), None)
            except Exception:  # noqa: BLE001 - the pipes closed under us at exit, or a bug
                answer = _SHUT_DOWN if self.closed else (
                    "error", "exception", traceback.format_exc(), (), None, None)
            self._settle(future, answer)
            if self.closed:
                self._answer_queued()
                return

    def _settle(self, future, answer) -> None:
        """Answer one job's future (``_Worker._answer`` reads a worker's)."""
        with self._lock:
            self.in_flight -= 1
            self._unanswered.pop(id(future), None)
        future.set_result(answer)

    def _answer_queued(self) -> None:
        """On a closed pool: the jobs no thread will take are answered
        'unavailable' (their waiters compile in their own process)."""
        while True:
            try:
                _job, future = self._jobs.get_nowait()
            except queue.Empty:
                return
            self._settle(future, _SHUT_DOWN)

    def _start(self) -> _Worker:
        if self.unavailable:
            raise WorkerUnavailable(self.unavailable)
        try:
            w = _Worker(wait=False)
            with self._lock:  # listed while it starts: ``detach`` may hand it the jobs
                self._workers = [x for x in self._workers if x.alive()] + [w]
            w.wait_ready()
        except WorkerUnavailable as e:
            self.unavailable = str(e)
            raise
        return w

    def shutdown(self) -> None:
        """Kill the workers (compiles in flight are abandoned)."""
        with self._lock:
            self.closed = True
            workers, self._workers = self._workers, []
        self._answer_queued()
        for w in workers:
            w.stop()

    def detach(self) -> None:
        """At exit: let the compiles that store a module finish without this
        process (see the module docstring); kill the other workers."""
        with self._lock:
            if self.closed:
                return
            self.closed = True  # pool threads send nothing from now on
            workers, self._workers = self._workers, []
            unanswered = list(self._unanswered.values())
        busy, idle, inside = [], [], set()
        for w in workers:
            with w.send_lock:  # a job being written is written
                job = w.job
            if not w.alive():
                continue
            if job is not None and job.get("cache"):
                busy.append(w)
                inside.add(id(job))
            else:
                idle.append(w)
        # (a job answered meanwhile may be spooled too: its store is skipped)
        unsent = [j for j in unanswered if j.get("cache") and id(j) not in inside]
        spool = _write_spool(unsent) if unsent else None
        heir = (busy or idle or [None])[0]
        for w in busy:
            w.let_go(spool if w is heir else None)
        for w in idle:
            if w is heir:
                w.let_go(spool)
            else:
                w.stop()
        if spool is not None and heir is None:
            _start_spool_worker(spool)


def _write_spool(jobs: list[dict]) -> str | None:
    """``jobs`` pickled to a new file (written whole, then renamed into
    place); its path, or None if it cannot be written."""
    try:
        fd, tmp = tempfile.mkstemp(prefix="lazy-mlir-jobs-", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            dump(jobs, f)
        path = tmp[:-len(".tmp")] + ".pkl"
        os.replace(tmp, path)
        return path
    except (OSError, pickle.PicklingError) as e:
        log.debug("lazy-mlir: cannot hand %d unfinished compiles over: %s", len(jobs), e)
        return None


def _start_spool_worker(spool: str) -> None:
    """A worker process, on its own, for the jobs in ``spool`` (no worker was running)."""
    try:
        subprocess.Popen([sys.executable, *COMMAND, "--spool", spool], env=_worker_env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    except OSError as e:
        log.debug("lazy-mlir: cannot start a worker for the unfinished compiles: %s", e)


def _crash_repro(e: CompilerCrash, job: dict) -> tuple[str, tuple, str]:
    """(message, unlowered, repro directory) of a crash: the repro holds the
    job and the command that compiles it again in the foreground."""
    d = repro_dir()
    with open(d / "job.pkl", "wb") as f:
        dump(dict(job, cache=None), f)
    command = " ".join(shlex.quote(c) for c in (sys.executable, *COMMAND)) + f" --repro {d}/job.pkl"
    (d / "command.sh").write_text(f"#!/bin/sh\n{command}\n")
    (d / "error.txt").write_text(str(e))
    return (f"lazy-mlir: {e} for target {job['target'].name}\n  repro: {d}/job.pkl, run "
            f"{d}/command.sh", (), str(d))


def result_of(answer) -> CompiledGraph:
    """A worker's answer as ``compile_module`` gives it: the compiled graph,
    or the ``PipelineError`` it raised (``CompilerCrash`` for a dead worker)."""
    if answer[0] == "ok":
        return answer[1]
    _, kind, message, unlowered, repro, extra = answer
    if kind == "hazard":
        raise InPlaceHazard(message, extra[0], frozenset(extra[1]))
    if kind == "crash":
        raise CompilerCrash(message, Path(repro))
    if kind == "exception":
        raise PipelineError(f"lazy-mlir: the compile worker raised:\n{message}", None)
    raise PipelineError(message, Path(repro) if repro else None, tuple(unlowered))


_pool: list[CompilePool | None] = []
_pool_lock = threading.Lock()
_warned = [False]


def pool() -> CompilePool | None:
    """The process's pool, or None: compile in this process (0 workers, or
    workers could not start)."""
    with _pool_lock:
        if not _pool:
            n = worker_count()
            _pool.append(CompilePool(n) if n else None)
            if n:
                atexit.register(_pool[0].detach)
        p = _pool[0]
    if p is not None and p.unavailable:
        if not _warned[0]:
            _warned[0] = True
            log.warning("lazy-mlir: compile workers cannot start (%s); compiling in this "
                        "process, where a compiler crash ends the program "
                        "(LAZY_MLIR_COMPILE_WORKERS=0 silences this)", p.unavailable)
        return None
    return p


def reset() -> None:
    """Kill the workers and forget the pool: the next ``pool()`` reads the
    environment again (tests)."""
    with _pool_lock:
        old = _pool.pop() if _pool else None
        _warned[0] = False
    if old is not None:
        old.shutdown()


def in_flight() -> int:
    """Compiles submitted and not answered yet."""
    return _pool[0].in_flight if _pool and _pool[0] is not None else 0


def compile_in_worker(gm, target, config, cache=None, stages: bool = False) -> CompiledGraph:
    """``compile_module(lower_graph(gm))`` in a worker, waiting for it; in this
    process when no worker can run."""
    p = pool()
    answer = p.submit(gm, target, config, cache, stages).result() if p else ("unavailable",)
    if answer[0] == "unavailable":
        pool()  # warns once
        from ..pipeline.compile import compile_module, lower_graph
        from .compile_worker import store
        compiled = compile_module(lower_graph(None, target, config, gm), target, config)
        if cache:
            store(cache, compiled)
        return compiled
    return result_of(answer)
