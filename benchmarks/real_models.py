"""The real-model suite's training step: eager vs torch.compile vs TorchScript LTC vs lazy-mlir.

    python benchmarks/real_models.py [--size tiny|medium] [--models gpt2,bert,...]
        [--backends eager,compile,ts_lazy,lazy_mlir,lazy_mlir_step,lazy_mlir_compile] [--steps N]
        [--warmup W] [--rounds R] [--out FILE.md] [--log-dir DIR] [--warm-caches] [--no-floor]
        [--autocast bf16|fp16]

The models are ``lazy_mlir.models.real``' (GPT-2, BERT, ViT, ResNet
from transformers configs, an LSTM and an nn.TransformerEncoder language
model), trained with AdamW from the same seeded weights on the same batches.
Each (model, backend) pair runs in a fresh subprocess: PyTorch's TorchScript
lazy backend and lazy-mlir both own the ``lazy`` device and cannot share a
process, and a fresh process makes the first step (compilation) comparable.

Backends (``RUNNERS``, one function each; add a row by adding an entry):

- ``eager``: PyTorch on the CPU;
- ``compile``: ``torch.compile`` (inductor) of the whole step, its step-1 loss
  checked against eager's;
- ``ts_lazy``: PyTorch's TorchScript lazy backend (``torch._lazy.ts_backend``)
  with ``mark_step()``; AdamW not capturable (that backend refuses the flag);
- ``lazy_mlir``: the plain loop, the device + ``lm.mark_step()``;
- ``lazy_mlir_step``: ``lm.compile_train_step``, ``step(**batch)``;
- ``lazy_mlir_compile``: ``torch.compile(step, backend="lazy_mlir")``.

A timed step is zero_grad, forward, loss, backward, ``optimizer.step()``, the
backend's sync and ``loss.item()``; four batches are moved to the device
before timing and used in turn. Reported per row: the first step (with its
compile), min/median/max over ``--steps`` steps after ``--warmup`` untimed
ones, the median over eager's, and the step-1 loss against eager's. A row
whose process kept more than ``GROWTH_NOTED_MB`` more resident memory over
its timed steps says so in its notes (a leak shows there first).

``--autocast bf16`` runs every forward and loss under autocast: eager and
both ``torch.compile`` rows under ``torch.autocast("cpu", dtype)``, the
lazy-mlir rows under ``lm.autocast("lazy", dtype)`` (eager CPU autocast's
policy), backward and ``optimizer.step()`` outside, as PyTorch's recipe has
it. TorchScript's lazy backend has no autocast (its row is refused).

A second table gives each model's compute floor (``_roofline.py``): the
step's FLOPs at the best float32 matmul rate measured on this host, against
eager's median. No float32 backend runs a step faster, so a ratio goal below
it cannot be met here (``--no-floor`` skips it, ~30 s).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as H  # noqa: E402

SIZES = ("tiny", "medium")
N_BATCHES = 4
DEFAULT_STEPS = {"tiny": 20, "medium": 8}
AUTOCAST_ENV = "BENCH_AUTOCAST"  # the driver's --autocast, read by its workers


def suite_module():
    """``lazy_mlir.models.real``, loaded by ``_harness.zoo_module``
    (without registering lazy-mlir's ``lazy`` device)."""
    return H.zoo_module("real.py")


# --------------------------------------------------------------------------- runners
# A runner takes the suite's RealModel and returns (device, step, sync):
# ``step(batch) -> loss`` runs one training step on a batch already on
# ``device``; ``sync()`` ends it (mark_step on the lazy backends).

def autocast_dtype():
    """The ``--autocast`` dtype the driver passed down (None: float32)."""
    import torch
    name = os.environ.get(AUTOCAST_ENV, "")
    return {"": None, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def _region(device: str):
    """A context manager factory: the forward's autocast region on ``device``."""
    import contextlib

    import torch
    dtype = autocast_dtype()
    if dtype is None:
        return contextlib.nullcontext
    if device == "lazy":
        import lazy_mlir as lm
        return lambda: lm.autocast("lazy", dtype=dtype)
    return lambda: torch.autocast("cpu", dtype=dtype)


def _plain_step(rm, model, opt, device="cpu"):
    region = _region(device)

    def step(batch):
        opt.zero_grad(set_to_none=True)
        with region():
            loss = rm.loss(model, batch)
        loss.backward()
        opt.step()
        return loss
    return step


class _InRegion:
    """``fn`` called under ``region()`` (compile_train_step records what it
    calls; the region must be inside the step, around forward and loss)."""

    def __init__(self, fn, region):
        self.fn, self.region = fn, region

    def __call__(self, *args, **kwargs):
        with self.region():
            return self.fn(*args, **kwargs)


def run_eager(rm):
    model = rm.make()
    return "cpu", model, _plain_step(rm, model, rm.optimizer(model)), lambda: None


def run_compile(rm):
    import torch
    model = rm.make()
    return "cpu", model, torch.compile(_plain_step(rm, model, rm.optimizer(model))), lambda: None


def run_lazy_mlir_compile(rm):
    """``torch.compile(step, backend="lazy_mlir")`` on CPU tensors (the
    ``compile`` row's step, compiled by our backend instead of inductor)."""
    import torch
    from lazy_mlir.frontends import dynamo
    dynamo.register()  # a checkout not reinstalled lacks the entry point
    model = rm.make()
    step = _plain_step(rm, model, rm.optimizer(model))
    return "cpu", model, torch.compile(step, backend="lazy_mlir"), lambda: None


def run_ts_lazy(rm):
    import torch._lazy
    import torch._lazy.ts_backend
    if autocast_dtype() is not None:
        raise RuntimeError("TorchScript's lazy backend has no autocast")
    torch._lazy.ts_backend.init()
    model = rm.make().to("lazy")
    opt = rm.optimizer(model, capturable=False)
    return "lazy", model, _plain_step(rm, model, opt), torch._lazy.mark_step


def run_lazy_mlir(rm):
    import lazy_mlir as lm
    model = rm.make().to("lazy")
    return "lazy", model, _plain_step(rm, model, rm.optimizer(model), "lazy"), lm.mark_step


def run_lazy_mlir_step(rm):
    import lazy_mlir as lm
    model = rm.make().to("lazy")
    opt = rm.optimizer(model)
    region = _region("lazy")
    if autocast_dtype() is not None:  # forward and loss in the region, inside the step
        forward = model.forward
        model.forward = _InRegion(forward, region)
    loss_fn = None if rm.computes_own_loss else _InRegion(rm.loss_fn, region)
    step = (lm.compile_train_step(model, opt) if loss_fn is None
            else lm.compile_train_step(model, loss_fn, opt))
    return "lazy", model, lambda batch: step(**batch), lm.mark_step


RUNNERS = {
    "eager": run_eager,
    "compile": run_compile,
    "ts_lazy": run_ts_lazy,
    "lazy_mlir": run_lazy_mlir,
    "lazy_mlir_step": run_lazy_mlir_step,
    "lazy_mlir_compile": run_lazy_mlir_compile,
}


# --------------------------------------------------------------------------- worker

# A steady loop holds its memory flat: growth past this over the timed steps
# is noted (GPT-2 medium leaked ~190 MB a step on IREE's local-task driver).
GROWTH_NOTED_MB = 32


def _resident_mb() -> float:
    """This process's resident memory (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


def run_worker(backend: str, model_id: str, steps: int, warmup: int) -> dict:
    """Time one (model, backend) pair in this process; a JSON-able dict."""
    import torch
    name, size = model_id.rsplit("-", 1)
    res: dict = {"backend": backend, "model": model_id}
    try:
        if backend == "compile":
            import torch._inductor.config as icfg
            icfg.layout_optimization = False  # as benchmarks/train_step.py: wrong conv grads
        rm = suite_module().real_model(name, size)
        device, model, step, sync = RUNNERS[backend](rm)
        model.train()
        batches = [rm.batch(i, device) for i in range(N_BATCHES)]
        sync()  # the batches are on the device before timing starts
        res["threads"] = torch.get_num_threads()
        times, losses = [], []
        for i in range(1 + warmup + steps):
            t0 = time.perf_counter()
            loss = step(batches[i % N_BATCHES])
            sync()
            losses.append(loss.item())
            times.append(time.perf_counter() - t0)
            if i == warmup:  # (outside the timed steps)
                resident = _resident_mb()
        res["first_ms"] = times[0] * 1e3
        if backend.startswith("lazy_mlir"):
            import lazy_mlir as lm
            lm.wait_device_ops()
        grew = _resident_mb() - resident
        res.update(losses=losses, steady_ms=[t * 1e3 for t in times[1 + warmup:]],
                   notes=H._backend_notes(backend) + (
                       [f"resident memory +{grew:.0f} MB over the timed steps"]
                       if grew > GROWTH_NOTED_MB else []))
    except BaseException as e:  # report, don't crash: the driver shows the first line
        msg = str(e).strip().splitlines()
        res["error"] = f"{type(e).__name__}: {msg[0] if msg else ''}".strip()
        res["traceback"] = traceback.format_exc()
    return res


# --------------------------------------------------------------------------- driver

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="tiny", choices=SIZES)
    p.add_argument("--models", default=None, help="comma-separated (default: every model)")
    p.add_argument("--backends", default=",".join(RUNNERS),
                   help=f"of {', '.join(RUNNERS)} (default: all)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"timed steps per row (default {DEFAULT_STEPS})")
    p.add_argument("--warmup", type=int, default=3,
                   help="untimed steps after the first (3: compile_train_step replays from "
                        "the fourth step on)")
    p.add_argument("--rounds", type=int, default=1,
                   help="run every backend of a row this many times, in turn; the ratio to "
                        "eager is then the median of the rounds' ratios")
    p.add_argument("--out", default=None, help="also write the markdown table here")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per subprocess")
    p.add_argument("--log-dir", default=None, help="keep each worker's stdout/stderr here")
    p.add_argument("--no-floor", action="store_true",
                   help="skip the compute-floor table (FLOPs at the host's GEMM rate)")
    p.add_argument("--threads", type=int, default=None, help="torch threads per worker")
    p.add_argument("--warm-caches", action="store_true",
                   help="use the user's compile caches (default: a fresh one per worker, so "
                        "the first step is a cold compile)")
    p.add_argument("--autocast", default=None, choices=("bf16", "fp16"),
                   help="forward and loss under autocast to this dtype (every row)")
    # internal: one worker
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--model", default=None, help=argparse.SUPPRESS)
    p.add_argument("--batch", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_inputs", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _roofline_json(*args: str) -> dict:
    """``_roofline.py``'s answer, from a fresh process (its threads and
    oneDNN setting stay out of this one)."""
    import json
    import subprocess
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_roofline.py")
    out = subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def floor_markdown(rows: list, specs: list) -> str:
    """The compute-floor table: per model, its step's GFLOP, the floor at the
    host's GEMM rate on the eager row's threads, and floor over eager."""
    import statistics

    from _roofline import floor_ms
    peak = _roofline_json("--peak")
    eager = {r.spec: r.res for r in rows if r.backend == "eager" and r.res.get("steady_ms")}
    title = (f"### Compute floor: a step's FLOPs at this host's best float32 matmul rate, "
             f"{peak['gflops_per_core']:.0f} GFLOP/s a core ({peak['by']}, one thread)")
    lines = [title, "",
             "| model | GFLOP a step | cores | floor (ms) | eager (ms) | floor vs eager |",
             "|---|---:|---:|---:|---:|---:|"]
    for spec in specs:
        gflop = _roofline_json("--flops", spec.name)["gflop"]
        res = eager.get(spec)
        cores = res["threads"] if res else os.cpu_count() or 1
        ms = floor_ms(gflop, peak, cores)
        e = statistics.median(res["steady_ms"]) if res else None
        lines.append(f"| {spec.name} | {gflop:.2f} | {cores} | {H._fmt(ms)} | "
                     f"{H._fmt(e) if e else '-'} | {f'{ms / e:.2f}x' if e else '-'} |")
    return "\n".join(lines) + "\n"


def _choices(text, known, what):
    out = [x.strip() for x in text.split(",") if x.strip()]
    for x in out:
        if x not in known:
            raise SystemExit(f"unknown {what} {x!r}; choose from {', '.join(known)}")
    return out


def main(argv=None) -> int:
    a = parse_args(argv)
    if a._worker:
        res = run_worker(a._worker, a.model, a.steps, a.warmup)
        H.emit(res)
        if "traceback" in res:
            sys.stderr.write(res["traceback"])
        return 0
    from rich.console import Console
    console = Console(stderr=True)
    os.environ[AUTOCAST_ENV] = a.autocast or ""  # the workers inherit it
    suite = suite_module()
    models = _choices(a.models or ",".join(suite.MODEL_NAMES), suite.MODEL_NAMES, "model")
    backends = sorted(_choices(a.backends, tuple(RUNNERS), "backend"),
                      key=list(RUNNERS).index)  # eager first: the reference
    steps = a.steps if a.steps is not None else DEFAULT_STEPS[a.size]
    batch = suite.SIZES[a.size]["batch"]
    specs = [H.Spec(f"{m}-{a.size}", batch, steps) for m in models]
    if a.log_dir:
        os.makedirs(a.log_dir, exist_ok=True)
    script = os.path.abspath(__file__)
    rows: list[H.Row] = []
    t_start, load0 = time.perf_counter(), os.getloadavg()[0]
    for spec in specs:
        runs = {b: [] for b in backends}
        for r in range(a.rounds):
            for b in backends:
                console.print(f"[bold]{spec.name}[/] [cyan]{b}[/]"
                              f"{f' round {r + 1}/{a.rounds}' if a.rounds > 1 else ''} ...",
                              end=" ")
                res = H.run_subprocess(script, spec, b, a.warmup, "", a.timeout, a.log_dir,
                                       cold=not a.warm_caches, threads=a.threads,
                                       log_tag=f"_round{r + 1}" if a.rounds > 1 else "")
                runs[b].append(res)
                console.print(f"[red]error[/] {res['error']}" if "error" in res else
                              f"first {res['first_ms']:.0f} ms, loss@1 {res['losses'][0]:.6f} "
                              f"({res['wall_s']:.1f} s)")
        rows += [H.Row(spec, b, H.merge_rounds(runs[b])) for b in backends]
    H.judge(rows)
    title = (f"## Real models ({a.size}){f', {a.autocast} autocast' if a.autocast else ''}, "
             f"AdamW, {steps} timed steps after {a.warmup} warmup, "
             f"{'warm' if a.warm_caches else 'cold (empty)'} compile caches; "
             + H.environment_line(load0, t_start))
    H.print_report(rows, f"real models, {a.size}", title, a.out)
    if not a.no_floor:
        floor = floor_markdown(rows, specs)
        print()
        print(floor)
        if a.out:
            with open(a.out, "a") as f:
                f.write("\n" + floor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
