"""Shared helpers for the benchmarks: models, data, per-backend training steps,
the worker that times one (model, backend) pair, and the driver that runs each
pair in a fresh subprocess and formats the results as a markdown table.

A worker prints one line ``@@RESULT@@ {json}`` on stdout; everything else it
prints (compiler chatter, warnings) is ignored by the driver.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

RESULT_TAG = "@@RESULT@@"
BACKENDS = ("eager", "compile", "ts_lazy", "lazy_mlir", "lazy_mlir_step", "lazy_mlir_compile")
"""``lazy_mlir_step``: the same step through ``lm.compile_train_step`` (replayed
as one compiled graph once it repeats; plain lazy steps when it cannot).
``lazy_mlir_compile``: the step through ``torch.compile(step, backend="lazy_mlir")``
on CPU tensors, as the ``compile`` row does with inductor."""
MODELS = ("cnn", "lenet", "mlp")
CONV_MODELS = ("same", "depthwise")
"""Optional rows (``--models same,depthwise``), batch 32 on 1x28x28 inputs:
``same``: 3x3 convolutions with padding 1, max pool, a 3x3 stride-2 one and
batch norm; ``depthwise``: a depthwise 3x3 and a 1x1 convolution (MobileNet's
block). The convolution shapes the four rows above lack."""
REL_TOL = 1e-3          # every backend: step-1 loss vs eager, relative
COMPILE_ABS_TOL = 1e-4  # torch.compile: step-1 loss vs eager, absolute
DRIFT_REL_TOL = 1e-3    # steps 2-4 (informational): loss vs eager, relative


# --------------------------------------------------------------------------- models

@dataclass(frozen=True)
class Spec:
    name: str
    batch: int
    steps: int  # default number of timed steps

    @property
    def key(self) -> str:
        return f"{self.name}_b{self.batch}"


def default_specs(models, quick: bool, steps: int | None) -> list[Spec]:
    """The rows to run: CNN b64, LeNet b64 (+ b1 unless quick), MLP b128.

    Default step counts give each row a second or more of lazy-mlir steps:
    on a shared machine a burst of load took the median of 20 LeNet steps
    (80 ms) from 4 to 8 ms."""
    out = []
    for m in models:
        if m == "cnn":
            rows = [(64, 30)]
        elif m == "lenet":
            rows = [(64, 200)] if quick else [(64, 200), (1, 1000)]
        elif m == "mlp":
            rows = [(128, 100)]
        elif m in CONV_MODELS:
            rows = [(32, 50)]
        else:
            raise SystemExit(f"unknown model {m!r}; choose from "
                             f"{', '.join(MODELS + CONV_MODELS)}")
        out += [Spec(m, b, steps if steps is not None else (5 if quick else n))
                for b, n in rows]
    return out


def tool_module(filename: str):
    """``lazy_mlir/tools/<filename>`` loaded from its file, without importing
    the ``lazy_mlir`` package: importing it registers the ``lazy`` device, which
    must not happen in the ts_lazy worker (nor in the driver)."""
    import importlib.util
    name = "_bench_" + filename.removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    pkg = importlib.util.find_spec("lazy_mlir")
    if pkg is None or not pkg.submodule_search_locations:
        raise ImportError("lazy_mlir is not importable: run `pip install -e .` in the repo, "
                          "or set PYTHONPATH to the repo's root")
    path = os.path.join(list(pkg.submodule_search_locations)[0], "tools", filename)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def seed_models():
    """``lazy_mlir.tools.seed_models``, loaded by ``tool_module``."""
    return tool_module("seed_models.py")


def build(name: str):
    """(model, optimizer factory, loss function) for a model name."""
    import torch
    import torch.nn.functional as F
    sm = seed_models()
    LeNet5, MLP, MnistCNN = sm.LeNet5, sm.MLP, sm.MnistCNN
    if name == "cnn":
        return (MnistCNN(dropout=False),
                lambda p: torch.optim.Adadelta(p, lr=1.0),
                lambda out, y: F.nll_loss(out, y))
    if name == "lenet":
        return (LeNet5(),
                lambda p: torch.optim.SGD(p, lr=0.001),
                lambda out, y: F.nll_loss(F.log_softmax(out, dim=1), y))
    if name == "mlp":
        return (MLP((784, 1024, 1024, 10)),
                lambda p, **kw: torch.optim.Adam(p, lr=1e-3, **kw),
                lambda out, y: F.cross_entropy(out, y))
    if name in CONV_MODELS:
        return (_conv_model(name), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                lambda out, y: F.cross_entropy(out, y))
    raise ValueError(name)


def _conv_model(name: str):
    import torch.nn as nn
    if name == "same":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU(),
        nn.Conv2d(32, 64, 1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 14 * 14, 10))


def make_inputs(spec: Spec, path: str, seed: int = 0) -> None:
    """Create the batch and the initial weights once; every backend loads them."""
    import torch
    torch.manual_seed(seed)
    model, _, _ = build(spec.name)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(spec.batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (spec.batch,), generator=g, dtype=torch.int64)
    torch.save({"x": x, "y": y, "state": model.state_dict()}, path)


# --------------------------------------------------------------------------- worker

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
        times, losses = [], []
        for i in range(1 + warmup + steps):
            t0 = time.perf_counter()
            loss = fn(x, y)
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


def emit(res: dict) -> None:
    sys.stdout.write(f"\n{RESULT_TAG} {json.dumps(res)}\n")
    sys.stdout.flush()


# --------------------------------------------------------------------------- driver

@dataclass
class Row:
    spec: Spec
    backend: str
    res: dict = field(default_factory=dict)
    correctness: str = ""
    notes: list[str] = field(default_factory=list)


def run_subprocess(script: str, spec: Spec, backend: str, warmup: int, inputs: str,
                   timeout: float, log_dir: str | None = None, cold: bool = True,
                   threads: int | None = None, log_tag: str = "") -> dict:
    """Run one worker; its log, with ``log_dir``, is ``<row>_<backend><log_tag>.log``
    (a tag per round keeps every round's)."""
    cmd = [sys.executable, script, "--_worker", backend, "--model", spec.name,
           "--batch", str(spec.batch), "--steps", str(spec.steps), "--warmup", str(warmup),
           "--_inputs", inputs]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Steps are timed compiled: wait for each compile rather than run eagerly
    # meanwhile (background compiles: benchmarks/first_step.py).
    env.setdefault("LAZY_MLIR_COMPILE", "wait")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                   BENCH_TORCH_THREADS=str(threads))
    cache = None
    if cold:
        # Fresh compile caches, so that the first step measures a cold compile
        # (torch.compile's FX/inductor cache, lazy-mlir's persistent module cache).
        cache = tempfile.mkdtemp(prefix="bench_cache_")
        env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"),
                   LAZY_MLIR_CACHE_DIR=os.path.join(cache, "lazy_mlir"),
                   XDG_CACHE_HOME=os.path.join(cache, "xdg"))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s"}
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    wall = time.perf_counter() - t0
    if log_dir:
        with open(os.path.join(log_dir, f"{spec.key}_{backend}{log_tag}.log"), "w") as f:
            f.write(" ".join(cmd) + f"\n# rc={p.returncode} wall={wall:.1f}s\n")
            f.write("## stdout\n" + p.stdout + "\n## stderr\n" + p.stderr)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(RESULT_TAG):
            res = json.loads(line[len(RESULT_TAG):])
            res["wall_s"] = wall
            res["load"] = load
            return res
    # The worker died without reporting (signal, abort in native code, ...).
    tail = [ln for ln in (p.stderr or p.stdout).splitlines() if ln.strip()]
    err = next((ln for ln in reversed(tail) if "Error" in ln or "error" in ln),
               tail[-1] if tail else "")
    return {"error": f"worker exited with code {p.returncode}: {err.strip()}"[:300],
            "wall_s": wall, "load": load}


def merge_rounds(results: list[dict]) -> dict:
    """One row's result from several rounds (fresh subprocesses) of a pair:
    every round's steps together, and each round's median (``round_ms``) for
    ``paired_ratio``. The first round gives the first step and the losses; a
    round that failed fails the row."""
    for res in results:
        if "error" in res:
            return res
    out = dict(results[0])
    if len(results) > 1:
        out["steady_ms"] = [t for res in results for t in res["steady_ms"]]
        out["round_ms"] = [statistics.median(res["steady_ms"]) for res in results]
        out["load"] = max(res.get("load", 0) for res in results)
    return out


def paired_ratio(res: dict, eager: dict) -> tuple[float, float, float] | None:
    """(median, min, max) over rounds of this row's median over eager's in the
    same round; None without rounds on both sides. Rounds run the backends
    one after the other, so a ratio within a round sees the same load."""
    a, e = res.get("round_ms"), eager.get("round_ms")
    if not a or not e or len(a) != len(e):
        return None
    ratios = [x / y for x, y in zip(a, e)]
    return statistics.median(ratios), min(ratios), max(ratios)


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def judge(rows: list[Row]) -> None:
    """Fill in correctness (step-1 loss vs eager) and notes for every row."""
    ref = {r.spec: r.res for r in rows if r.backend == "eager" and "losses" in r.res}
    for r in rows:
        if "error" in r.res:
            r.correctness = "ERROR"
            r.notes.insert(0, r.res["error"])
            continue
        r.notes += r.res.get("notes", [])
        if r.res.get("load", 0) > (os.cpu_count() or 1):
            # other processes compete for the cores: the timings are noisy
            r.notes.append(f"host load {r.res['load']:.1f} at start")
        losses = r.res["losses"]
        eager = ref.get(r.spec)
        if eager is None:
            r.correctness = "n/a (no eager)"
            continue
        e = eager["losses"]
        d = _rel(losses[0], e[0])
        ok = d <= REL_TOL
        if r.backend == "compile" and abs(losses[0] - e[0]) > COMPILE_ABS_TOL:
            ok = False
            r.notes.append(f"compile step-1 |dloss|={abs(losses[0] - e[0]):.2e} > 1e-4")
        r.correctness = "ok" if ok else "MISMATCH"
        if not ok:
            r.notes.append(f"step-1 loss {losses[0]:.6g} vs eager {e[0]:.6g}")
        if r.backend != "eager":
            # Informational: steps 2-4 see the gradients and the optimizer's update.
            # (Later steps are not compared: the CNN with Adadelta(lr=1) amplifies
            # rounding, a 1e-7 weight perturbation moves its step-9 loss by ~0.5%.)
            for i in range(1, min(4, len(losses), len(e))):
                if _rel(losses[i], e[i]) > DRIFT_REL_TOL:
                    r.notes.append(f"step-{i + 1} loss {losses[i]:.6g} vs eager {e[i]:.6g}")
                    break


def _fmt(ms: float) -> str:
    return f"{ms:.1f}" if ms < 100 else f"{ms:.0f}"


HEADER = ["model", "batch", "backend", "first step (ms)", "step min (ms)",
          "step median (ms)", "step max (ms)", "vs eager (median)", "correctness", "notes"]


def table_rows(rows: list[Row]) -> list[list[str]]:
    med, eager = {}, {}
    for r in rows:
        if r.backend == "eager" and r.res.get("steady_ms"):
            med[r.spec] = statistics.median(r.res["steady_ms"])
            eager[r.spec] = r.res
    out = []
    for r in rows:
        s = r.res.get("steady_ms") or []
        first = _fmt(r.res["first_ms"]) if "first_ms" in r.res else "-"
        if s:
            m = statistics.median(s)
            cells = [_fmt(min(s)), _fmt(m), _fmt(max(s))]
            ratio = f"{m / med[r.spec]:.2f}x" if r.spec in med else "-"
            paired = paired_ratio(r.res, eager[r.spec]) if r.spec in eager else None
            if paired is not None and r.backend != "eager":
                ratio = f"{paired[0]:.2f}x ({paired[1]:.2f}-{paired[2]:.2f})"
        else:
            cells, ratio = ["-", "-", "-"], "-"
        out.append([r.spec.name, str(r.spec.batch), r.backend, first, *cells, ratio,
                    r.correctness, "; ".join(r.notes)])
    return out


def markdown(rows: list[Row], title: str) -> str:
    body = table_rows(rows)
    esc = lambda c: c.replace("|", "\\|")  # noqa: E731
    lines = [title, "", "| " + " | ".join(HEADER) + " |",
             "|" + "|".join("---" if i in (0, 2, 8, 9) else "---:" for i in range(len(HEADER)))
             + "|"]
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def rich_table(rows: list[Row], title: str):
    from rich.table import Table
    t = Table(title=title)
    for i, h in enumerate(HEADER):
        if h == "notes":
            t.add_column(h, overflow="fold", min_width=30)
        else:
            t.add_column(h, justify="left" if i in (0, 2, 8) else "right", no_wrap=True)
    for r, cells in zip(rows, table_rows(rows)):
        style = {"ok": None, "ERROR": "red", "MISMATCH": "yellow"}.get(r.correctness)
        t.add_row(*cells, style=style)
    return t


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


def environment_line(load0: float, t_start: float) -> str:
    """The benchmark title's tail: torch version, cores, load and total time."""
    import platform
    import time
    import torch
    return (f"torch {torch.__version__}, {os.cpu_count()} CPU cores ({platform.machine()}); "
            f"load average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
            f"total {time.perf_counter() - t_start:.0f} s")


def print_report(rows: list[Row], table_title: str, title: str, out_path: str | None) -> None:
    """The rich table on the console (at least 180 columns, so rows stay whole
    in a log), then the markdown table, also written to ``out_path``."""
    from rich.console import Console
    Console(width=max(Console().width, 180)).print(rich_table(rows, table_title))
    md = markdown(rows, title)
    print()
    print(md)
    if out_path:
        with open(out_path, "w") as f:
            f.write(md)


def inputs_dir() -> str:
    return tempfile.mkdtemp(prefix="lazy_mlir_bench_")
