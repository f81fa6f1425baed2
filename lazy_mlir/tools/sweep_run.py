"""One sweep entry, trained eagerly and on the lazy device (in this process).

``run_entry(name, steps)`` returns a JSON-able record: eager's losses and
step time; for the plain lazy loop and for ``lm.compile_train_step``: the
losses, the largest relative difference from eager's, fallback ops
(``aten::`` counters), graphs run eagerly whole (``EagerGraph``), compiles
and those after warm-up (``WARMUP`` steps), compile seconds, captured
ops a step and the median step time after warm-up; or the error that ended
a mode. The runner (``tools/sweep.py``) calls it in a child process per
entry, so a crash or a hang costs that entry only.
"""
from __future__ import annotations

import logging
import os
import statistics
import time
import traceback

import torch

from .sweep_report import TOLERANCE, WARMUP

# Steps whose compiles are expected: the first step's graph (no optimizer
# state yet), the steady step's, and on the fourth or fifth step the plain
# loop's early-output split of the steady step (its loss read: two graphs,
# once; decided at the steady graph's second or third launch, then final,
# lazy/early_outputs.py): sweep_report.WARMUP.


class _LossModule(torch.nn.Module):
    """The entry's model with its loss as the forward's result, so that
    ``compile_train_step(module, optimizer)`` trains it on ``step(**batch)``."""

    def __init__(self, model, loss):
        super().__init__()
        self.model, self._loss = model, loss

    def forward(self, **batch):
        return self._loss(self.model, batch)


def _to(batch: dict, device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


PERTURBATION = 1e-6
"""Relative change of every weight for eager's sensitivity check: a tiny
model that trains chaotically (MobileNetV2 with batch norm over 2 images)
ends as far from eager's own losses as the lazy device's float rounding."""


def _eager(entry, steps: int, nudge: float = 0.0) -> dict:
    model = entry.make().train()
    if nudge:
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + nudge)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, times = [], []
    for step in range(steps):
        batch = entry.batch(step)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = entry.loss(model, batch)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return {"losses": losses, "step_ms": _median_ms(times)}


def _median_ms(times: list[float]) -> float | None:
    """The median step after warm-up; None without one (a triage run of
    ``WARMUP`` steps or fewer: its last step can hold a compile)."""
    tail = times[WARMUP:]
    return round(statistics.median(tail) * 1e3, 3) if tail else None


def _counters() -> dict:
    from lazy_mlir import metrics
    return {n: metrics.counter_value(n) for n in metrics.counter_names()}


class _Refusals(logging.Handler):
    """The reasons ``compile_train_step`` gave for running the plain step."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []

    def emit(self, record):
        text = record.getMessage()
        if "compile_train_step runs the plain" in text:
            self.reasons.append(text.split(": ", 1)[-1][:300])


def _lazy(entry, steps: int, mode: str) -> dict:
    refusals = _Refusals()
    logging.getLogger("lazy_mlir").addHandler(refusals)
    try:
        out = _lazy_steps(entry, steps, mode)
    finally:
        logging.getLogger("lazy_mlir").removeHandler(refusals)
    if mode == "train_step":
        out["refused"] = refusals.reasons
    return out


def _lazy_steps(entry, steps: int, mode: str) -> dict:
    import lazy_mlir as lm
    from lazy_mlir import metrics
    metrics.reset()
    model = entry.make().train().to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
    step_fn = (lm.compile_train_step(_LossModule(model, entry.loss), opt)
               if mode == "train_step" else None)
    losses, times, compiles = [], [], []
    for step in range(steps):
        batch = _to(entry.batch(step), "lazy")
        t0 = time.perf_counter()
        if step_fn is not None:
            loss = step_fn(**batch)
        else:
            opt.zero_grad(set_to_none=True)
            loss = entry.loss(model, batch)
            loss.backward()
            opt.step()
            lm.mark_step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
        compiles.append(metrics.counter_value("UncachedCompile"))
    counters = _counters()
    fallbacks = {n[6:]: v for n, v in counters.items() if n.startswith("aten::") and v}
    seconds = metrics.metric_data("CompileTime")[1]
    captured = sum(v for n, v in counters.items() if n.startswith("lazy::"))
    return {
        "losses": losses, "step_ms": _median_ms(times),
        "fallback_ops": sum(fallbacks.values()), "fallbacks": fallbacks,
        "eager_graphs": counters.get("EagerGraph", 0),
        "compiles": compiles[-1] if compiles else 0,
        "compiles_by_step": compiles,
        "splits": {k: v for k, v in counters.items() if k.startswith("Split") and v},
        "compiles_after_warmup": compiles[-1] - compiles[min(WARMUP, steps) - 1] if compiles else 0,
        "compile_s": round(seconds, 2),
        "ops_per_step": round(captured / max(steps, 1), 1),
        "replayed": counters.get("TrainStepReplayed", 0),
        "plain_steps": counters.get("TrainStepPlain", 0),
    }


MAX_PARAMETERS = 20_000_000


def _parameters_on_meta(entry) -> int | None:
    """The model's parameter count, built on the meta device (no memory)."""
    try:
        with torch.device("meta"):
            return sum(p.numel() for p in entry.make().parameters())
    except Exception:  # noqa: BLE001 - a model that cannot be built on meta: built for real
        return None


def _difference(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) / max(abs(x), 1e-6) for x, y in zip(a, b)), default=0.0)


def _error(e: BaseException) -> str:
    last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
    where = f" ({last[0].filename.split('site-packages/')[-1]}:{last[0].lineno})" if last else ""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}{where}"


def run_entry(name: str, steps: int = 7, modes=("plain", "train_step")) -> dict:
    from lazy_mlir.models.sweep import by_name
    entry = by_name(name)
    record: dict = {"name": name, "family": entry.family, "steps": steps,
                    "load": round(os.getloadavg()[0], 1)}  # (timings under load are noisy)
    params = _parameters_on_meta(entry)
    record["parameters"] = params
    if params is not None and params > MAX_PARAMETERS:
        record["status"] = "too-big"  # (a config the shrink table does not reach)
        record["error"] = f"{params / 1e6:.0f}M parameters at the tiny size"
        return record
    try:
        record["eager"] = _eager(entry, steps)
    except Exception as e:  # noqa: BLE001 - the entry does not train eagerly
        record["status"] = "eager-fails"
        record["error"] = _error(e)
        return record
    for mode in modes:
        try:
            out = _lazy(entry, steps, mode)
            out["loss_difference"] = _difference(record["eager"]["losses"], out["losses"])
        except Exception as e:  # noqa: BLE001 - a crash where eager runs: a bug, reported
            out = {"crash": _error(e), "traceback": traceback.format_exc()[-3000:]}
        record[mode] = out
    record["status"] = "ran"
    record["load_end"] = round(os.getloadavg()[0], 1)
    if any((record[m] or {}).get("loss_difference", 0) > TOLERANCE for m in modes):
        record["no_dropout"] = _without_dropout(entry, steps)
    return record


def _without_dropout(entry, steps: int) -> dict:
    """The plain loop again, eagerly and lazily, with every dropout
    probability 0 (``LAZY_MLIR_SWEEP_NO_DROPOUT``): the lazy device draws its
    own dropout stream, so a mismatch that vanishes here is that stream, not a
    wrong value."""
    os.environ["LAZY_MLIR_SWEEP_NO_DROPOUT"] = "1"
    try:
        eager = _eager(entry, steps)
        lazy = _lazy(entry, steps, "plain")
        out = {"loss_difference": _difference(eager["losses"], lazy["losses"]),
               "eager_losses": eager["losses"], "losses": lazy["losses"]}
        if out["loss_difference"] > TOLERANCE:  # (is eager itself that sensitive?)
            nudged = _eager(entry, steps, nudge=PERTURBATION)
            out["eager_perturbed_difference"] = _difference(eager["losses"], nudged["losses"])
        return out
    except Exception as e:  # noqa: BLE001 - reported, the entry's record stands
        return {"crash": _error(e)}
    finally:
        del os.environ["LAZY_MLIR_SWEEP_NO_DROPOUT"]
