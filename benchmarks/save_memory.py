"""Host memory of saving a ~1 GiB model from the lazy device: ``torch.save``,
``lm.save`` and the streaming ``lm.serialization.save``.

    python benchmarks/save_memory.py [--layers 16] [--width 4096]
        [--modes torch_save,lm_save,stream] [--zero-copy 1,0]

Each save runs in a fresh subprocess: a stack of ``--layers`` bias-free
``Linear(width, width)`` (16 x 4096^2 float32 = 1 GiB) moved to the lazy
device and updated once in a graph, so its weights are device buffers, then
saved into a temporary directory. The parent samples the child's resident
set (``VmRSS`` of ``/proc/<pid>/status``) every millisecond; the child
returns its freed heap to the system (``malloc_trim``: lazy-mlir keeps
freed memory otherwise) and resets its peak (``clear_refs`` 5) just before
the save and reads
``VmHWM`` after it. Rows: the resident set before the save, its peak during
the save over that (sampled by the parent, and the kernel's peak), and
the save's wall time. ``--zero-copy 0`` runs the children with
``LAZY_MLIR_ZERO_COPY=0``: every read from the device copies, as on a
device whose memory is apart from the host's (the cpu target otherwise
reads its buffers in place, and every way of saving then copies nothing).

Measured (2 cores, 1 GiB model, ``--zero-copy 0``): with
``LAZY_MLIR_KEEP_FREED_MEMORY=0`` in the environment (malloc hands 64 MiB
blocks back when freed, so the resident set is what is live) ``torch.save``
peaks 1024 MiB over the resident set and the streaming save 64 MiB, one
tensor, in every run; with lazy-mlir's default (freed memory stays in the
heap) ``torch.save`` and ``lm.save`` 1024-1031 MiB, the streaming save
64-320 MiB over six runs (glibc does not always reuse the freed block for
the next tensor). With in-place reads (``--zero-copy 1``) every way: 0-5 MiB.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


def _status(pid, field: str) -> int:
    """A ``/proc/<pid>/status`` field in bytes (0 once the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def child(mode: str, layers: int, width: int, directory: str) -> None:
    """Build, update once, save; write the marks the parent reads."""
    import torch
    import torch.nn as nn
    import lazy_mlir as lm

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width, bias=False) for _ in range(layers)])
    model.to("lazy")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    lm.mark_step()
    lm.wait_device_ops()
    # lazy-mlir keeps freed memory resident (runtime/host_memory.py), and a
    # save's copies would reuse the setup's freed pages unseen: hand them
    # back, so the resident set is the live data and a copy shows.
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    path = os.path.join(directory, "ckpt")
    with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) from here
        f.write("5")
    marks = open(os.path.join(directory, "marks"), "w", buffering=1)
    before = _status("self", "VmRSS")
    marks.write(f"START {time.time()} {before}\n")
    started = time.perf_counter()
    sd = model.state_dict()
    if mode == "torch_save":
        torch.save(sd, path)
    elif mode == "lm_save":
        lm.save(sd, path)
    else:
        lm.serialization.save(sd, path)
    seconds = time.perf_counter() - started
    marks.write(f"END {time.time()} {_status('self', 'VmHWM')} {seconds}\n")


def measure(mode: str, layers: int, width: int, zero_copy: str) -> dict:
    """Run one child; its resident set before and at its peak during the save."""
    env = dict(os.environ, LAZY_MLIR_ZERO_COPY=zero_copy)
    with tempfile.TemporaryDirectory(dir=os.environ.get("SAVE_MEMORY_DIR")) as directory:
        cmd = [sys.executable, __file__, "--child", mode, "--layers", str(layers),
               "--width", str(width), "--dir", directory]
        proc = subprocess.Popen(cmd, env=env)
        samples = []  # (time, rss)
        while proc.poll() is None:
            samples.append((time.time(), _status(proc.pid, "VmRSS")))
            time.sleep(0.001)
        with open(os.path.join(directory, "marks")) as f:
            out = f.read()
    if proc.returncode:
        raise RuntimeError(f"{mode}: the child failed ({proc.returncode})")
    marks = {line.split()[0]: line.split()[1:] for line in out.splitlines()
             if line.startswith(("START", "END"))}
    start, before = float(marks["START"][0]), int(marks["START"][1])
    end, hwm, seconds = float(marks["END"][0]), int(marks["END"][1]), float(marks["END"][2])
    during = [rss for t, rss in samples if start <= t <= end]
    return {"before": before, "sampled": max(during, default=before), "hwm": hwm,
            "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--modes", default="torch_save,lm_save,stream")
    ap.add_argument("--zero-copy", default="1,0")
    ap.add_argument("--child")
    ap.add_argument("--dir")
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.layers, args.width, args.dir)
    size = args.layers * args.width * args.width * 4
    print(f"model: {args.layers} x Linear({args.width}, {args.width}), {size / MiB:.0f} MiB")
    print(f"{'mode':<12} {'zero-copy':>9} {'RSS before':>11} {'peak - before (sampled)':>24} "
          f"{'(VmHWM)':>9} {'seconds':>8}")
    for zero_copy in args.zero_copy.split(","):
        for mode in args.modes.split(","):
            r = measure(mode, args.layers, args.width, zero_copy)
            print(f"{mode:<12} {zero_copy:>9} {r['before'] / MiB:>8.0f} MiB "
                  f"{(r['sampled'] - r['before']) / MiB:>20.0f} MiB "
                  f"{(r['hwm'] - r['before']) / MiB:>5.0f} MiB {r['seconds']:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
