"""The sweep's markdown report: counts against the issue's goals, then a
row per entry (``tools/sweep.py --report``)."""
from __future__ import annotations

import pathlib
import statistics

MODES = ("plain", "train_step")
TOLERANCE = 1e-2  # largest relative loss difference from eager over the steps
WARMUP = 5  # steps before the steady state (sweep_run says why)
QUIET_LOAD = 2.0  # a step time counts toward the medians only if timed at this load or less
TIMED_STEPS = 5  # ... and over this many steps after warm-up (``--steps 10``)


def verdict(rec: dict, mode: str) -> str:
    """``crash``, ``eager-graph`` (a whole graph ran eagerly), ``fallback``,
    ``mismatch``, ``not-replayed`` (``compile_train_step`` ran every step
    as the plain lazy step), ``recompiles`` or ``ok`` for one mode of a run entry;
    ``not-run`` where the entry was run without that mode (a triage run of
    the plain loop only, ``LAZY_MLIR_SWEEP_MODES=plain``)."""
    if mode not in rec:
        return "not-run"
    out = rec.get(mode) or {}
    if "crash" in out:
        return "crash"
    if out.get("eager_graphs"):
        return "eager-graph"
    if out.get("fallback_ops"):
        return "fallback"
    if out.get("loss_difference", 0) > TOLERANCE:
        again = rec.get("no_dropout") or {}
        if "crash" not in again and again.get("loss_difference", 1.0) <= TOLERANCE:
            return "dropout-rng"  # (eager's losses without dropout: not a wrong value)
        if again.get("eager_perturbed_difference", 0) > TOLERANCE:
            return "unstable"  # (eager with weights nudged by 1e-6 is as far from eager)
        return "mismatch"
    if mode == "train_step" and out.get("replayed") == 0:
        return "not-replayed"
    if _compiles_after_warmup(out):
        return "recompiles"
    return "ok"


def _compiles_after_warmup(out: dict) -> int:
    """Compiles after ``WARMUP`` steps, from the compiles by step
    where recorded (so a record made under an older warm-up reads the same)."""
    by_step = out.get("compiles_by_step") or []
    if len(by_step) >= WARMUP:
        return by_step[-1] - by_step[WARMUP - 1]
    return out.get("compiles_after_warmup", 0)


def _ratio(rec: dict, mode: str) -> float | None:
    """Lazy step time over eager's, from steps after warm-up only (a triage
    record of ``WARMUP`` steps timed its last step, which can hold a compile)."""
    out, eager = rec.get(mode) or {}, rec.get("eager") or {}
    if mode in rec.get("kept", ()):
        return None  # (a mode kept from an earlier run: timed under other conditions than eager here)
    load = max(rec.get("load", 0.0), rec.get("load_end", 0.0))
    if rec.get("steps", 0) < WARMUP + TIMED_STEPS or load > QUIET_LOAD:
        return None  # (few steps, or timed under load: noise, shown in no median)
    if out.get("step_ms") and eager.get("step_ms"):
        return out["step_ms"] / eager["step_ms"]
    return None


def summary(records: dict[str, dict]) -> list[str]:
    ran_any = [r for r in records.values() if r.get("status") == "ran"]
    lines = [f"- entries recorded: {len(records)}; trained eagerly and run: {len(ran_any)}; "
             + ", ".join(f"{s}: {sum(r.get('status') == s for r in records.values())}"
                         for s in ("eager-fails", "too-big", "hang", "died"))]
    for mode in MODES:
        counts: dict[str, int] = {}
        ran = [r for r in ran_any if mode in r]
        for r in ran:
            v = verdict(r, mode)
            counts[v] = counts.get(v, 0) + 1
        clean = sum(1 for r in ran if verdict(r, mode) in (
                        "ok", "recompiles", "mismatch", "not-replayed", "dropout-rng", "unstable")
                    and not (r.get(mode) or {}).get("fallback_ops"))
        ratios = [x for x in (_ratio(r, mode) for r in ran
                              if verdict(r, mode) in ("ok", "dropout-rng")) if x]
        med = (f"{statistics.median(ratios):.2f}x (range {min(ratios):.2f}-{max(ratios):.2f}x, "
               f"{len(ratios)} entries timed over {TIMED_STEPS} steps at load <= {QUIET_LOAD:g})" if ratios else "-")
        share = f"{100 * clean / len(ran):.0f}%" if ran else "-"
        lines.append(f"- **{mode}**: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                     + f"; zero fallback ops: {clean}/{len(ran)} ({share}); "
                     f"median step vs eager (ok, dropout-rng): {med}")
    return lines


def _cell(rec: dict, mode: str) -> str:
    out = rec.get(mode) or {}
    v = verdict(rec, mode)
    if v == "not-run":
        return "-"
    if v == "crash":
        return f"crash: {out['crash'][:90]}"
    parts = [v]
    if out.get("fallback_ops"):
        top = sorted(out["fallbacks"].items(), key=lambda kv: -kv[1])[:3]
        parts.append(f"{out['fallback_ops']} fb ({', '.join(k for k, _ in top)})")
    ratio = _ratio(rec, mode)
    if ratio:
        parts.append(f"{ratio:.2f}x")
    if out.get("compiles"):
        parts.append(f"{out['compiles']} c / {out.get('compile_s', 0):.0f} s")
    if v == "not-replayed" and out.get("refused"):
        parts.append(f"({out['refused'][0][:80]})")
    if out.get("loss_difference", 0) > TOLERANCE:
        parts.append(f"Δ{out['loss_difference']:.1e}")
        again = rec.get("no_dropout") or {}
        if "loss_difference" in again:
            parts.append(f"Δ{again['loss_difference']:.1e} without dropout")
    return " · ".join(parts)


def table(records: dict[str, dict]) -> list[str]:
    rows = ["| entry | eager ms | plain loop | compile_train_step | ops/step |",
            "|---|---:|---|---|---:|"]
    for name in sorted(records):
        rec = records[name]
        if rec.get("status") != "ran":
            rows.append(f"| {name} | - | {rec.get('status')}: {rec.get('error', '')[:100]} | | |")
            continue
        ops = (rec.get("plain") or {}).get("ops_per_step", "")
        eager_ms = rec["eager"]["step_ms"] if rec.get("steps", WARMUP + 1) > WARMUP else None
        rows.append(f"| {name} | {eager_ms or '-'} | {_cell(rec, 'plain')} | "
                    f"{_cell(rec, 'train_step')} | {ops} |")
    return rows


def write_report(records: dict[str, dict], path: pathlib.Path) -> str:
    text = "\n".join([
        "# Model sweep", "",
        "Written by `python -m lazy_mlir.tools.sweep --report` from `results.jsonl`. "
        "Each entry trains 7 steps with AdamW eagerly and on the lazy device "
        "(`LAZY_MLIR_COMPILE=wait`): the plain loop with `mark_step()`, and "
        "`lm.compile_train_step`. Verdicts: `crash` (the lazy program raised where eager "
        "runs), `eager-graph` (a whole graph ran eagerly), `fallback` (ops ran eagerly), "
        f"`mismatch` (a loss differs from eager's by more than {TOLERANCE:g} relative; "
        "where the model uses dropout, the lazy device draws its own dropout stream, so "
        "a mismatch is run again without dropout: `dropout-rng` where the losses then "
        "match eager's; `unstable` where they do not, but eager itself with every weight "
        "scaled by 1+1e-6 ends as far from its own losses: a chaotic tiny model, not a wrong "
        "value), `not-replayed` (`compile_train_step` ran every step as the plain lazy step; "
        "the reason it gave in brackets), "
        "`recompiles` (a compile after the first five steps: the first step, the steady step, "
        "and on the fourth or fifth the early-output split of the loss read), `ok`. Cells: verdict, "
        "fallback ops, step time against eager (the median step after warm-up, shown only for a "
        f"record timed over {TIMED_STEPS} steps or more at load {QUIET_LOAD:g} or less on this 2-core machine: under load eager's "
        "and the lazy step's times are noise), compiles / compile seconds; "
        "`-`: the mode was not run (a triage run of the plain loop only). Each mode's counts "
        "are over the entries run in that mode.",
        "", "## Summary", "", *summary(records), "", "## Entries", "", *table(records), ""])
    path.write_text(text)
    return text
