"""What runs in the worker subprocess: a backend set up, one (model, backend)
pair timed in this process (``run_worker``), its notes (compiles, fallbacks),
and the result line the driver reads (``emit``: ``@@RESULT@@ {json}``); and
the training-step closures the in-process benchmarks share."""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

from _specs import BACKENDS, RESULT_TAG, build


def _setup_backend(backend: str):
    """Import/initialise a backend; returns (device, sync function)."""
    import torch
    if backend in ("eager", "compile"):
        return "cpu", lambda: None
    if backend == "lazy_mlir_compile":
        from lazy_mlir.frontends import dynamo
        dynamo.register()  # a checkout not reinstalled lacks the entry point
        return "cpu", lambda: None
    if backend == "ts_lazy":
        import torch._lazy
        import torch._lazy.ts_backend
        torch._lazy.ts_backend.init()
        return "lazy", torch._lazy.mark_step
    if backend in ("lazy_mlir", "lazy_mlir_step"):
        import lazy_mlir as lm
        return "lazy", lm.mark_step
    raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


def _fallback_note(fb: dict[str, int], show: int = 4) -> str:
    """'ops run eagerly: 21 kinds, 1242 calls (mul x576, add x360, ...)'."""
    top = sorted(fb.items(), key=lambda kv: (-kv[1], kv[0]))
    names = ", ".join(f"{k} x{v}" for k, v in top[:show]) + (", ..." if len(top) > show else "")
    return f"ops run eagerly: {len(fb)} kinds, {sum(fb.values())} calls ({names})"


def _backend_notes(backend: str) -> list[str]:
    notes = []
    if backend in ("lazy_mlir", "lazy_mlir_step", "lazy_mlir_compile"):
        import lazy_mlir as lm
        m = lm.metrics
        notes.append(f"compiles={m.counter_value('UncachedCompile')}")
        if backend == "lazy_mlir_compile":
            notes.append(f"dynamo graphs={m.counter_value('DynamoGraph')}, "
                         f"eager graphs={m.counter_value('DynamoEagerGraph')}")
        if backend == "lazy_mlir_step":
            notes.append(f"replayed={m.counter_value('TrainStepReplayed')}, "
                         f"plain={m.counter_value('TrainStepPlain')}")
        if m.counter_value("SplitLaunch"):  # (lazy/early_outputs.py)
            notes.append(f"split steps={m.counter_value('SplitLaunch')}")
        fb = {n[6:]: m.counter_value(n) for n in m.counter_names() if n.startswith("aten::")}
        if fb:
            notes.append(_fallback_note(fb))
    elif backend == "ts_lazy":
        try:
            import torch._lazy.metrics as tm
            # aten::_local_scalar_dense is loss.item() itself, not a fallback of the step
            fb = {n[6:]: tm.counter_value(n) for n in tm.counter_names()
                  if n.startswith("aten::") and n != "aten::_local_scalar_dense"}
            if fb:
                notes.append(_fallback_note(fb))
        except Exception:  # metrics are informational only
            pass
    return notes


def run_worker(backend: str, model_name: str, batch: int, steps: int, warmup: int,
               inputs: str) -> dict:
    """Time one (model, backend) pair in this process; returns a JSON-able dict."""
    import torch
    res: dict = {"backend": backend, "model": model_name, "batch": batch}
    try:
        if os.environ.get("BENCH_TORCH_THREADS"):
            torch.set_num_threads(int(os.environ["BENCH_TORCH_THREADS"]))
        res["threads"] = torch.get_num_threads()
        device, sync = _setup_backend(backend)
        if backend == "compile":
            import torch._inductor.config as icfg
            # With the default (True) inductor computes zero conv gradients for the CNN.
            icfg.layout_optimization = False
        data = torch.load(inputs)
        model, make_opt, loss_fn = build(model_name)
        model.load_state_dict(data["state"])
        model = model.to(device)
        model.train()
        # Adam reads its step count on the host unless capturable: a replayed
        # step needs it on the device (same algorithm, corrections as tensor ops)
        kw = {"capturable": True} if backend == "lazy_mlir_step" and model_name == "mlp" else {}
        opt = make_opt(model.parameters(), **kw)
        x, y = data["x"].to(device), data["y"].to(device)
        sync()  # the inputs are on the device before timing starts

        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        fn = torch.compile(step) if backend == "compile" else step
        if backend == "lazy_mlir_compile":
            fn = torch.compile(step, backend="lazy_mlir")
        if backend == "lazy_mlir_step":
            import lazy_mlir as lm
            fn = lm.compile_train_step(model, loss_fn, opt)
        sched = _scheduler(opt, 1 + warmup + steps)
        times, losses = [], []
        for i in range(1 + warmup + steps):
            t0 = time.perf_counter()
            loss = fn(x, y)
            if sched is not None:
                sched.step()
            sync()
            value = loss.item()
            times.append(time.perf_counter() - t0)
            losses.append(value)
            if i == 0:
                res["first_ms"] = times[0] * 1e3
        if backend in ("lazy_mlir", "lazy_mlir_step"):
            import lazy_mlir as lm
            lm.wait_device_ops()
        steady = [t * 1e3 for t in times[1 + warmup:]]
        res.update(losses=losses, steady_ms=steady, notes=_backend_notes(backend))
    except BaseException as e:  # report, don't crash: the driver shows the first line
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}".strip()
        res["traceback"] = traceback.format_exc()
    return res


def _scheduler(opt, total: int):
    """``BENCH_SCHEDULE=onecycle``: a OneCycleLR stepped after every step
    (a new learning rate and momentum each step), peaking at 10x the
    optimizer's learning rate; else None."""
    import torch
    if os.environ.get("BENCH_SCHEDULE", "none") != "onecycle":
        return None
    lr = opt.param_groups[0]["lr"]
    return torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=10 * lr, total_steps=total + 1)


def emit(res: dict) -> None:
    sys.stdout.write(f"\n{RESULT_TAG} {json.dumps(res)}\n")
    sys.stdout.flush()


def cycling_step(rm, model, opt, batches):
    """A training step of the suite model ``rm`` (zero_grad, loss, backward,
    ``opt.step()``) that takes ``batches`` in turn; returns the loss."""
    state = {"i": 0}

    def step():
        opt.zero_grad(set_to_none=True)
        loss = rm.loss(model, batches[state["i"] % len(batches)])
        state["i"] += 1
        loss.backward()
        opt.step()
        return loss
    return step


def timed_lazy_step(step, mark_step) -> tuple[float, float, float, float]:
    """One step of a lazy training loop, timed: (capture s, mark_step s,
    capture + mark_step CPU s of this thread, loss read-back s)."""
    c0, t0 = time.thread_time(), time.perf_counter()
    loss = step()
    t1 = time.perf_counter()
    mark_step()
    t2 = time.perf_counter()
    cpu = time.thread_time() - c0
    loss.item()
    return t1 - t0, t2 - t1, cpu, time.perf_counter() - t2
