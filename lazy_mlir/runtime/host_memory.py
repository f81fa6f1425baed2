"""Keep freed host memory in the process's heap (glibc), for the cpu target.

Why: IREE allocates each call's transient memory (the CNN training step's
intermediates: one 193 MB block) with ``malloc`` and frees it when the call
ends. glibc serves blocks over its mmap threshold (at most 32 MB) with
``mmap`` and hands them back with ``munmap``, so every step page-faulted the
whole block in again: 60,000 minor faults a step, half the step's CPU time in
the kernel (the CNN step ran in 142 ms, 79 ms without the faults, measured
with ``iree-benchmark-module`` on the dumped module).

``keep_freed_memory()`` sets ``M_MMAP_MAX=0`` (no chunk is mmap'd: large
blocks come from the heap), raises ``M_TRIM_THRESHOLD`` so freed memory is
reused rather than returned to the system, and sets ``M_ARENA_MAX=1``: with
per-thread arenas, a step whose graph ran on another thread than the last
one's took its memory from another arena, whose heaps glibc unmaps when they
empty (the CNN step still faulted 190 MB in on 10 of 16 steps; none with one
arena). The process's resident memory then
stays at its high-water mark (as PyTorch's CUDA caching allocator does on a
GPU); it does not grow past it. glibc still maps memory when the heap cannot
grow. ``LAZY_MLIR_KEEP_FREED_MEMORY=0`` leaves malloc as it is.

When: before any thread but the main one has called malloc. glibc fixes its
arena limit when the first thread arena is made, so ``M_ARENA_MAX=1`` set
later does not stop a new thread (lazy-mlir's run thread, a compile thread)
from getting its own arena; and a non-main arena's heaps are at most 64 MB,
so larger blocks (GPT-2 medium's step allocates 207 and 289 MB) are mapped
and unmapped on every call whatever ``M_MMAP_MAX`` says. Applied at device
creation only, GPT-2 medium still faulted 56,000-100,000 pages a step (up to
121,000 with ``compile_train_step``); applied at ``import lazy_mlir``, none
from the second step on. So ``import lazy_mlir`` applies it when the default
target (``LAZY_MLIR_TARGET``, else cpu) keeps its buffers in host memory,
and the first host-memory device applies it otherwise (a later
``set_target("cpu")``), as well as it can then.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("lazy_mlir")

_M_TRIM_THRESHOLD = -1   # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
_TRIM_THRESHOLD = 2**31 - 1  # an int: mallopt takes one
_done: list[bool | None] = [None]


def requested() -> bool:
    """Whether ``LAZY_MLIR_KEEP_FREED_MEMORY`` allows the setting (default: yes)."""
    return os.environ.get("LAZY_MLIR_KEEP_FREED_MEMORY", "1").strip().lower() not in (
        "0", "false", "no", "off")


def keep_freed_memory() -> bool:
    """Apply the setting once; whether it is in effect."""
    if _done[0] is not None:
        return _done[0]
    _done[0] = False
    if not requested():
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: musl and others have no mallopt semantics
    except (OSError, AttributeError):
        return False
    ok = (mallopt(_M_MMAP_MAX, 0) == 1 and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1
          and mallopt(_M_ARENA_MAX, 1) == 1)
    if not ok:
        log.debug("lazy-mlir: mallopt refused; freed memory goes back to the system")
    _done[0] = ok
    return ok


def keep_freed_memory_if_default_target_is_host() -> bool:
    """At import: apply the setting when the default target is the cpu one
    (its drivers, local-task and local-sync, keep buffers in host memory).
    Reads the target's name only: resolving a GPU target probes drivers."""
    name = os.environ.get("LAZY_MLIR_TARGET", "cpu").partition(":")[0].strip().lower()
    return name == "cpu" and keep_freed_memory()


def in_effect() -> bool:
    """Whether freed memory is kept (for ``lazy-mlir doctor`` and tests)."""
    return bool(_done[0])
