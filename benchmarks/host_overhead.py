"""Host overhead of a cache-hit training step, split by phase, per captured op.

    python benchmarks/host_overhead.py [--models lenet,mlp] [--steps N] [--batch B]
        [--profile N]

Runs whole training steps (zero_grad, forward, loss, backward, optimizer
step) on the lazy device until every graph is cached, then times ``--steps``
more: capture (the step's Python, every aten op recorded), ``mark_step``
(graph build, key, cache lookup, launch) and ``loss.item()`` (waits for the
run and reads the loss back). Reports medians and minima of wall time, and
the capturing thread's CPU time for capture + mark_step (``time.thread_time``,
which a loaded machine inflates less than wall time), each also per captured
op (``lazy::`` counters). ``--profile N`` prints cProfile's N most expensive
functions (by own time) over the timed steps instead. Last, the per-op floors
the table stands on: an add in eager CPU, in a Python ``__torch_dispatch__``
subclass that does nothing but wrap its result (the least any capture in
Python pays), and on the lazy device.

Models: ``lenet`` (LeNet-5, SGD, batch 1 by default) and ``mlp`` (784-1024-
1024-10, Adam, batch 8 by default: host costs do not depend on the batch).
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.models.seed import MLP, LeNet5

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _harness, beside
import _harness as H  # noqa: E402


def build(name: str, batch: int | None):
    torch.manual_seed(0)
    if name == "lenet":
        model, batch = LeNet5(), batch or 1
        make_opt = lambda p: torch.optim.SGD(p, lr=0.001)  # noqa: E731
        loss_fn = lambda out, y: F.nll_loss(F.log_softmax(out, dim=1), y)  # noqa: E731
        x = torch.randn(batch, 1, 28, 28)
    elif name == "mlp":
        model, batch = MLP((784, 1024, 1024, 10)), batch or 8
        make_opt = lambda p: torch.optim.Adam(p, lr=1e-3)  # noqa: E731
        loss_fn = F.cross_entropy
        x = torch.randn(batch, 784)
    else:
        raise SystemExit(f"unknown model {name!r}: lenet or mlp")
    model = model.to("lazy")
    opt = make_opt(model.parameters())
    x, y = x.to("lazy"), torch.randint(0, 10, (batch,)).to("lazy")

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step, batch


def _ops() -> int:
    return sum(lm.metrics.counter_value(n) for n in lm.metrics.counter_names()
               if n.startswith("lazy::"))


def measure(name: str, steps: int, batch: int | None, profile: int) -> str:
    step, batch = build(name, batch)
    for _ in range(5):  # compile, then settle
        loss = step()
        lm.mark_step()
        loss.item()
    lm.metrics.reset()
    compiles = lm.metrics.counter_value("UncachedCompile")
    cap, sync, read, cpu = [], [], [], []
    prof = cProfile.Profile() if profile else None
    if prof:
        prof.enable()
    for _ in range(steps):
        for series, seconds in zip((cap, sync, cpu, read), H.timed_lazy_step(step, lm.mark_step)):
            series.append(seconds)
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(profile)
    lm.wait_device_ops()
    ops = _ops() / steps
    recompiled = lm.metrics.counter_value("UncachedCompile") - compiles

    def us(xs, f):
        return f(xs) * 1e6

    return (f"| {name} b{batch} | {ops:.0f} | "
            f"{us(cap, statistics.median):.0f} / {us(cap, min):.0f} | "
            f"{us(sync, statistics.median):.0f} / {us(sync, min):.0f} | "
            f"{us(read, statistics.median):.0f} / {us(read, min):.0f} | "
            f"{us(cpu, statistics.median) / ops:.1f} / {us(cpu, min) / ops:.1f} | "
            f"{recompiled} |")


class _Bare(torch.Tensor):
    """The least a Python ``__torch_dispatch__`` subclass can do per op: make
    a wrapper for the result (shapes kept, no graph, no data)."""

    @staticmethod
    def __new__(cls, like):
        return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype,
                                                   device="meta")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _Bare(args[0])


def floors(n: int = 100, trials: int = 30) -> str:
    """Thread CPU per op, min over ``trials`` of ``n`` adds of 4x4 tensors:
    eager CPU, the bare subclass above, and a lazy tensor (a planned op)."""
    def per_op(a, b, sync=lambda: None):
        best = float("inf")
        for _ in range(trials):
            t = time.thread_time()
            for _ in range(n):
                a + b
            best = min(best, (time.thread_time() - t) / n)
            sync()
        return best * 1e6
    x = torch.randn(4, 4)
    bare = _Bare(torch.empty(4, 4, device="meta"))
    lazy = x.to("lazy")
    lazy + lazy  # its plan
    return (f"per-op floors (thread CPU, min of {trials} x {n} `a + b`, 4x4): eager CPU "
            f"{per_op(x, x):.1f} us, an empty __torch_dispatch__ subclass "
            f"{per_op(bare, bare):.1f} us, lazy {per_op(lazy, lazy, lm.mark_step):.1f} us")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet,mlp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    a = ap.parse_args()
    rows = [measure(m.strip(), a.steps, a.batch, a.profile) for m in a.models.split(",")]
    print("| step | ops | capture us (median / min) | mark_step us | item us "
          "| thread CPU us/op, capture+mark_step (median / min) | recompiles |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print(floors())


if __name__ == "__main__":
    main()
