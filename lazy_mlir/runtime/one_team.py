"""One OpenMP team per process: the run thread computes with one thread.

PyTorch's kernels that modules call from the host (``host_blas``'s
``torch.mm``, ``host_rnn``'s oneDNN LSTM) run on the thread that runs the
job. libgomp gives each thread that opens a parallel region its own team of
workers, and once the threads of all teams outnumber the cores it throttles
every team's spin-wait at barriers to ~1,000 iterations (``GOMP_SPINCOUNT``'s
throttled value), so each worker sleeps between regions and is woken by a
futex. oneDNN's LSTM opens a region per time step: measured on the suite's
medium LSTM, 2 cores, the same arguments in one process, its backward took
34 ms before lazy-mlir's run thread had computed anything and 60-67 ms after
(the run thread's team of two plus the main thread's); the replayed step
490 against 297 ms with this module. Eager PyTorch has one team (the main
thread's), which is what this keeps.

So the run thread (``worker``) sets its own OpenMP thread count to one when
it starts: a per-thread setting (``omp_set_num_threads`` sets the calling
thread's ICV; PyTorch's MKL follows it), the process's other threads and
``torch.get_num_threads()`` elsewhere are untouched. (Not MKL's own
``mkl_set_num_threads_local`` through ctypes: that crashed the process.) The cost:
a job the run thread runs makes its host calls on one core (the main thread
runs the job when it waits first, as in ``step(); loss.item()``). A no-op
without libgomp (another OpenMP runtime).
"""
from __future__ import annotations

import ctypes
import logging

log = logging.getLogger("lazy_mlir")


def _symbol(path: str, name: str):
    try:
        return getattr(ctypes.CDLL(path), name)
    except (OSError, AttributeError):
        return None


def compute_on_one_thread() -> bool:
    """Limit the calling thread's OpenMP parallelism to one thread;
    True when OpenMP's was set."""
    import torch
    torch.get_num_threads()  # ATen's per-thread init first: it would undo ours later
    omp = _symbol("libgomp.so.1", "omp_set_num_threads")
    if omp is None:
        log.debug("lazy-mlir: no libgomp: the run thread keeps its OpenMP threads")
        return False
    omp(ctypes.c_int(1))
    return True
