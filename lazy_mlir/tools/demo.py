"""``lazy-mlir demo``: the LTC tutorial's CNN trained on real handwritten digits.

Trains on the lazy device by the product's best path, ``lm.compile_train_step``
(the tutorial's step recorded, then replayed as one compiled graph), or with
``--plain`` by the tutorial's own loop with only the device and ``mark_step()``
changed; shows progress (step, loss, compiles), then reports which path ran,
test accuracy, the warm-up (steps that traced, compiled, or ran eagerly while
a module compiled in the background) apart from the compiled steady state,
and eager PyTorch's step, timed first, before any compile holds the cores.
Compiles still running when training ends are waited for (they are cached
for the next run), so no compile worker outlives the demo.
"""
from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR


def _batches(x, y, batch_size):
    for i in range(0, len(y), batch_size):
        yield x[i:i + batch_size], y[i:i + batch_size]


# A lazy step moved one of these: it traced, compiled or ran eagerly (warm-up).
_WARMUP_COUNTERS = ("UncachedCompile", "PersistentCacheHit", "EagerWhileCompiling", "EagerGraph",
                    "TrainStepRecorded")


def _warmup_marks() -> tuple[int, ...]:
    import lazy_mlir as lm
    return tuple(lm.metrics.counter_value(n) for n in _WARMUP_COUNTERS)


def train(device, x, y, epochs, batch_size, steps=None, progress=None, seed=0,
          compiled=False, warmup=None):
    """Train the tutorial's CNN; returns (model, losses, step times in s).
    ``compiled``: on the lazy device, through ``lm.compile_train_step``.
    ``warmup``: a list that gets, per step, whether it was a warm-up step."""
    import lazy_mlir as lm
    from ..models.seed import MnistCNN
    torch.manual_seed(seed)
    model = MnistCNN().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    losses, times = [], []
    lazy = torch.device(device).type == "lazy"
    step = lm.compile_train_step(model, F.nll_loss, optimizer) if lazy and compiled else None
    done = 0
    for epoch in range(epochs):
        model.train()
        for data, target in _batches(x, y, batch_size):
            marks = _warmup_marks() if warmup is not None else None
            t0 = time.perf_counter()
            data, target = data.to(device), target.to(device)
            if step is not None:
                loss = step(data, target)
            else:
                optimizer.zero_grad(set_to_none=True)
                loss = F.nll_loss(model(data), target)
                loss.backward()
                optimizer.step()
                if lazy:
                    lm.mark_step()
            losses.append(loss.item())
            times.append(time.perf_counter() - t0)
            if warmup is not None:
                warmup.append(_warmup_marks() != marks)
            done += 1
            if progress:
                progress(epoch, done, losses[-1])
            if steps is not None and done >= steps:
                return model, losses, times
        scheduler.step()
    return model, losses, times


def path_used(compiled: bool, steps: int) -> str:
    """Which path the lazy training took, from the counters."""
    import lazy_mlir as lm
    if not compiled:
        return "plain loop (mark_step)"
    replayed = lm.metrics.counter_value("TrainStepReplayed")
    if replayed == 0:
        return "compile_train_step, never replayed (see the log)"
    return f"compile_train_step ({replayed} of {steps} steps replayed)"


def accuracy(model, device, x, y, batch_size=256) -> float:
    import lazy_mlir as lm
    model.eval()
    correct = 0
    with torch.no_grad():
        for data, target in _batches(x, y, batch_size):
            pred = model(data.to(device)).argmax(dim=1)
            correct += int((pred.cpu() == target).sum())
            if torch.device(device).type == "lazy":
                lm.mark_step()
    return correct / len(y)


def run_demo(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    import lazy_mlir as lm
    from ..lazy.sync import current_target
    from ..compile_service.lookup import compiles_running, wait_for_compiles
    from ..models.seed import digits

    if args.target:
        lm.set_target(args.target)
    console = Console()
    x_train, y_train, x_test, y_test = digits()
    per_epoch = -(-len(y_train) // args.batch_size)
    total = per_epoch * args.epochs if args.steps is None else min(args.steps,
                                                                   per_epoch * args.epochs)
    console.print(f"[bold]lazy-mlir demo[/]: LTC tutorial CNN on {len(y_train)} handwritten "
                  f"digits (28x28), batch {args.batch_size}, {args.epochs} epoch(s), "
                  f"target {current_target().name}")
    # Eager first, before any compile worker holds the cores. Its first steps
    # warm up its kernels: time 13 steps, report the last 10.
    _, _, eager_times = train("cpu", x_train, y_train, 1, args.batch_size, 13)
    eager_times = eager_times[3:]
    lm.metrics.reset()
    compiled = not getattr(args, "plain", False)
    warmup: list[bool] = []
    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(),
                  TextColumn("step {task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  console=console) as bar:
        task = bar.add_task("training (lazy)", total=total, info="")

        def progress(epoch, step, loss):
            bar.update(task, completed=step, info=f"epoch {epoch + 1} loss {loss:.4f} "
                       f"compiles {lm.metrics.counter_value('UncachedCompile')}")

        model, losses, times = train("lazy", x_train, y_train, args.epochs, args.batch_size,
                                     args.steps, progress, compiled=compiled, warmup=warmup)
    acc = accuracy(model, "lazy", x_test, y_test)
    left = compiles_running()
    if left:
        with console.status(f"finishing {left} background compile(s) for the cache"):
            wait_for_compiles()
    console.print(_report(compiled, losses, times, warmup, eager_times, acc, left))
    if args.steps is None and acc <= 0.90:
        console.print(f"[red]test accuracy {acc:.1%} is not above 90%[/]")
        return 1
    return 0


def _report(compiled, losses, times, warmup, eager_times, acc, finished_after):
    from rich.table import Table

    import lazy_mlir as lm
    count = lm.metrics.counter_value
    steady = [t for t, w in zip(times, warmup) if not w]
    warm = [t for t, w in zip(times, warmup) if w]
    table = Table(title="lazy-mlir demo")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("path", path_used(compiled, len(losses)))
    table.add_row("training steps", str(len(losses)))
    table.add_row("final loss", f"{losses[-1]:.4f}")
    table.add_row("test accuracy", f"{acc:.1%}")
    table.add_row("compiles (UncachedCompile)", str(count("UncachedCompile")))
    table.add_row("graphs run eagerly while compiling (EagerWhileCompiling)",
                  str(count("EagerWhileCompiling")))
    table.add_row("compiles finished after training (cached for the next run)",
                  str(finished_after))
    table.add_row("fallback ops (aten::*)",
                  str(sum(count(n) for n in lm.metrics.counter_names() if n.startswith("aten::"))))
    table.add_row("warm-up: steps that traced, compiled or ran eagerly meanwhile",
                  f"{len(warm)} steps, {sum(warm):.1f} s")
    if steady:
        table.add_row(f"compiled step, median of {len(steady)}",
                      f"{statistics.median(steady) * 1e3:.1f} ms")
    else:
        table.add_row("compiled step", "none yet: training ended while compiling "
                      "(run again: the cache is warm)")
    table.add_row("eager PyTorch step, median (timed before any compile)",
                  f"{statistics.median(eager_times) * 1e3:.1f} ms")
    return table
