"""Host cost of the plain training loop (device + ``mark_step``) on the
real-model suite, per recorded op, on repeated (cache-hit) steps.

    python benchmarks/plain_loop.py [--models gpt2,bert,...] [--size tiny]
        [--steps N] [--warmup N] [--profile N] [--no-eager] [--floor]

For each model of ``lazy_mlir.models.real`` runs the README's loop
(``zero_grad(set_to_none=True)``, ``rm.loss(model, batch)``, ``backward``,
``opt.step()``, ``lm.mark_step()``) until every graph is cached, then times
``--steps`` more, one phase at a time: capture (the step's Python, every aten
op recorded), ``mark_step`` (graph build, key, cache lookup, launch) and
``loss.item()`` (waits for the run, reads the loss back). Rows: recorded ops
per step (``lazy::`` counters: a fused node such as ``linear`` or an
optimizer's foreach update counts once), the aten ops the same step runs in
eager PyTorch (counted under a ``TorchDispatchMode``: the issue's "recorded
ops" before nodes were fused, the denominator that stays fixed between
versions) and capture + mark_step thread CPU in microseconds per eager op,
capture and mark_step in microseconds per recorded op (wall), their sum in
the capturing thread's CPU time (``time.thread_time``, which a loaded
machine inflates less; its mean too, where Python's full
garbage collections show, one step in 10-20 paying 0.15-0.2 s),
the same per step in milliseconds (ops per step differ between versions: a
foreach node does a whole optimizer update), the number of Python's full
collections (generation 2) during the lazy steps,
the whole step (capture + mark_step + item) and, in the same process, the
same loop in eager PyTorch on the CPU, interleaved step by step with the lazy
one so that a burst of load hits both. Medians, with the minimum after a
slash. ``--floor`` adds the same step's thread CPU on a wrapper subclass that
records nothing (``_floor.py``: what PyTorch charges any Python capture, the
lower bound of ours), interleaved step by step too, and lazy/floor.
``--profile N`` prints cProfile's N most expensive functions (own time) over
the lazy steps of each model instead of timing.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time

from torch.utils._python_dispatch import TorchDispatchMode

import lazy_mlir as lm
from lazy_mlir.models.real import MODEL_NAMES, real_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _harness, beside
import _harness as H  # noqa: E402
from _floor import floor_loop  # noqa: E402


def _ops() -> int:
    return sum(lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
               if n.startswith("lazy::"))


def _loop(rm, device):
    model = rm.make().to(device)
    opt = rm.optimizer(model)
    batches = [rm.batch(i, device) for i in range(2)]  # moved once: the loop's own cost
    return H.cycling_step(rm, model, opt, batches)


class _CountOps(TorchDispatchMode):
    """Counts the aten ops run under it."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def eager_ops_per_step(rm) -> int:
    """Aten ops one eager step of ``rm`` runs (after a first step, which
    creates the optimizer's state)."""
    step = _loop(rm, "cpu")
    step()
    with _CountOps() as counter:
        step()
    return counter.ops


def measure(name: str, size: str, steps: int, warmup: int, profile: int, eager: bool,
            floor: bool = False):
    rm = real_model(name, size)
    eager_ops = eager_ops_per_step(rm)
    lazy_step = _loop(rm, "lazy")
    eager_step = _loop(rm, "cpu") if eager else None
    floor_step = floor_loop(rm) if floor else None
    floor_cpu = []
    for _ in range(warmup):  # compile, then settle
        loss = lazy_step()
        lm.mark_step()
        loss.item()
        if eager_step:
            eager_step().item()
        if floor_step:
            floor_step()
    gc.collect()  # (the warm-up's garbage: repeated steps are measured)
    lm.metrics.reset()
    compiles = lm.metrics.counter_value("UncachedCompile")
    cap, sync, read, whole, ref, cpu = [], [], [], [], [], []
    prof = cProfile.Profile() if profile else None
    full = []  # Python's full collections during the lazy steps

    def count_full(phase, info):
        if phase == "start" and info["generation"] == 2 and not eager_running[0]:
            full.append(1)
    eager_running = [False]
    gc.callbacks.append(count_full)
    for _ in range(steps):
        if prof:
            prof.enable()
        timed = H.timed_lazy_step(lazy_step, lm.mark_step)
        if prof:
            prof.disable()
        for series, seconds in zip((cap, sync, cpu, read), timed):
            series.append(seconds)
        whole.append(timed[0] + timed[1] + timed[3])
        if eager_step:
            eager_running[0] = True
            e0 = time.perf_counter()
            eager_step().item()
            ref.append(time.perf_counter() - e0)
            eager_running[0] = False
        if floor_step:
            eager_running[0] = True
            f0 = time.thread_time()
            floor_step()
            floor_cpu.append(time.thread_time() - f0)
            eager_running[0] = False
    gc.callbacks.remove(count_full)
    lm.wait_device_ops()
    ops = _ops() / steps
    fallbacks = sum(lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
                    if n.startswith("aten::"))
    recompiled = lm.metrics.counter_value("UncachedCompile") - compiles
    if prof:
        print(f"== {name}-{size}: {ops:.0f} ops/step")
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
    med = statistics.median

    def pair(xs, scale=1e6, per=1.0):
        return f"{med(xs) * scale / per:.1f} / {min(xs) * scale / per:.1f}"

    ratio = f"{med(whole) / med(ref):.2f}x" if ref else "-"
    floor_col = (f"{pair(floor_cpu, 1e3)} ({med(cpu) / med(floor_cpu):.2f}x)" if floor_cpu
                 else "-")
    eager_ms = pair(ref, 1e3) if ref else "-"
    return (f"| {name}-{size} | {ops:.0f} | {eager_ops} | {pair(cpu, per=eager_ops)} | "
            f"{pair(cap, per=ops)} | {pair(sync, per=ops)} | "
            f"{pair(cpu, per=ops)} / mean {statistics.mean(cpu) * 1e6 / ops:.1f} | "
            f"{pair(cpu, 1e3)} / mean {statistics.mean(cpu) * 1e3:.1f} | {floor_col} | "
            f"{len(full)} | "
            f"{pair(read, 1e3)} | "
            f"{pair(whole, 1e3)} | {eager_ms} | {ratio} | {fallbacks} | {recompiled} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODEL_NAMES))
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--floor", action="store_true", help="the no-op subclass floor too")
    a = ap.parse_args()
    rows = [measure(m.strip(), a.size, a.steps, a.warmup, a.profile, not a.no_eager, a.floor)
            for m in a.models.split(",")]
    print("| model | ops/step | eager ops/step | capture+mark_step thread CPU us/eager op "
          "| capture us/op | mark_step us/op | capture+mark_step thread CPU us/op "
          "| the same, ms/step | no-op subclass floor ms/step (lazy/floor) | full GCs | item ms | lazy step ms | eager step ms | lazy/eager "
          "| fallbacks | recompiles |")
    print("|---" * 16 + "|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
