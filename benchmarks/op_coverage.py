"""Op coverage of the lazy device: PyTorch's OpInfo samples vs eager CPU.

Runs the samples of ``op_db`` (torch.testing._internal.common_methods_invocations)
on the ``lazy`` device, compares every result with eager CPU, and classifies
each (op, dtype) as compiled / fallback / mismatch / error (see
``tests/e2e/opinfo_sweep.py``). Ops run in worker subprocesses: a sample that
hangs for ``--timeout`` seconds or crashes its process is recorded as an error
and the sweep goes on.

    python benchmarks/op_coverage.py --out-md cov.md --out-json cov.json
    python benchmarks/op_coverage.py --ops 'add,sum,nn.functional.conv2d' --dtypes float32,int64
    python benchmarks/op_coverage.py --ops '^nn\\.functional' --samples 2 --jobs 2
    python benchmarks/op_coverage.py --report-only --jsonl cov.jsonl --out-md cov.md

Results are appended to ``--jsonl`` as they come (``--resume`` skips what is
already there), so a long sweep can be stopped and resumed, and reported on
at any time with ``--report-only``.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import queue
import re
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import opinfo_sweep as sweep  # noqa: E402

STATUSES = ["compiled", "fallback", "mismatch", "error", "no_samples", "skipped",
            "unsupported_dtype", "no_variant"]
PROBLEMS = ("mismatch", "error", "fallback")


# -------------------------------------------------------------- running
def run(ops: list[str], dtypes: list[str], samples: int, jobs: int, timeout: float,
        variant: str, batch: bool, jsonl: str | None, done: set, in_process: bool) -> list[dict]:
    tasks = [(op, dt) for dt in dtypes for op in ops
             if (op, dt, variant) not in done and sweep.supports(op, sweep.DTYPES[dt])]
    total = len(tasks)
    print(f"op_coverage: {total} (op, dtype) pairs to run, {jobs} worker(s)", file=sys.stderr)
    q: queue.Queue = queue.Queue()
    for t in tasks:
        q.put(t)
    results: list[dict] = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    if jsonl:
        os.makedirs(os.path.dirname(os.path.abspath(jsonl)), exist_ok=True)
    out = open(jsonl, "a") if jsonl else None

    def finish(res: dict) -> None:
        with lock:
            results.append(res)
            if out:
                out.write(json.dumps(res) + "\n")
                out.flush()
            n = len(results)
            eta = (time.perf_counter() - t0) / n * (total - n)
            extra = res.get("cause") or ""
            if res["status"] == "mismatch":
                m = res["mismatches"][0]
                extra = f"{m['what']} max_abs={m.get('max_abs')} {m['desc']}"
            print(f"[{n}/{total} eta {eta / 60:.1f}m] {res['op']} {res['dtype']}: "
                  f"{res['status']} {res.get('seconds', 0):.1f}s {extra[:150]}",
                  file=sys.stderr, flush=True)

    def loop() -> None:
        worker = None if in_process else sweep.Worker(timeout=timeout)
        try:
            while True:
                try:
                    op, dt = q.get_nowait()
                except queue.Empty:
                    return
                try:
                    if worker is None:
                        res = sweep.run_op(op, dt, samples=samples, variant=variant, batch=batch)
                    else:
                        res = worker.run(op, dt, samples=samples, variant=variant, batch=batch)
                except Exception as e:  # noqa: BLE001
                    res = {"op": op, "dtype": dt, "variant": variant, "status": "error",
                           "cause": f"harness: {type(e).__name__}: {e}", "errors": [],
                           "mismatches": [], "fallback_ops": {}, "notes": []}
                res.setdefault("variant", variant)
                finish(res)
        finally:
            if worker is not None:
                worker.close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if out:
        out.close()
    return results


def read_jsonl(path: str) -> list[dict]:
    """Results of a (possibly interrupted) sweep; the last line of each
    (op, dtype, variant) wins."""
    by_key: dict = {}
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                by_key[(r["op"], r["dtype"], r.get("variant", "op"))] = r
    return list(by_key.values())


# --------------------------------------------------------------- report
def totals(results: list[dict], all_ops: list[str]) -> dict:
    out = {}
    by_dtype = collections.defaultdict(list)
    for r in results:
        by_dtype[r["dtype"]].append(r)
    for dt, rs in by_dtype.items():
        counts = collections.Counter(r["status"] for r in rs)
        supported = [n for n in all_ops if sweep.supports(n, sweep.DTYPES[dt])]
        run_ = sum(counts[s] for s in ("compiled", "fallback", "mismatch", "error"))
        out[dt] = {
            "op_db_ops_supporting_dtype": len(supported),
            "swept": len(rs),
            "counts": {s: counts.get(s, 0) for s in STATUSES if counts.get(s)},
            "compiled_pct_of_op_db": round(100 * counts["compiled"] / max(1, len(supported)), 1),
            "compiled_pct_of_swept": round(100 * counts["compiled"] / max(1, len(rs)), 1),
            "compiled_pct_of_run": round(100 * counts["compiled"] / max(1, run_), 1),
            "matching_pct_of_run": round(100 * (counts["compiled"] + counts["fallback"])
                                         / max(1, run_), 1),
        }
    return out


def _short(s: str, n: int = 90) -> str:
    s = (s or "").replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def _norm_message(msg: str) -> str:
    """An error message with its numbers and quoted names blurred, for grouping."""
    msg = re.sub(r"0x[0-9a-f]+", "0x…", msg)
    msg = re.sub(r"\[[\d, ]*\]", "[…]", msg)
    msg = re.sub(r"\b\d+\b", "N", msg)
    return msg[:160]


def _group_cause(cause: str) -> str:
    """A cause with source positions and sizes blurred, for grouping."""
    cause = re.sub(r"<stdin>:\d+:\d+: ", "", cause or "")
    cause = cause.replace(" (cached graph)", "")
    cause = re.sub(r"\b(to be|found|dimension #|operand #)\s*\d+", r"\1 N", cause)
    cause = re.sub(r"tensor<[^>]*>", "tensor<…>", cause)
    return cause


def _fmt_err(m: dict) -> str:
    if m.get("what") == "values":
        rel = m.get("max_rel")
        return (f"values ({m.get('severity')}): max_abs={m.get('max_abs'):.3g}"
                + (f", max_rel={rel:.3g}" if rel is not None else "")
                + f", {m.get('n_bad')}/{m.get('numel')} elements")
    return f"{m.get('what')}: got {m.get('actual')}, expected {m.get('expected')}"


def markdown(results: list[dict], meta: dict, tot: dict) -> str:
    L = []
    L.append("# lazy_mlir op coverage (PyTorch OpInfo samples vs eager CPU)\n")
    L.append(f"Generated {meta['date']} by `benchmarks/op_coverage.py` "
             f"(torch {meta['torch']}; {meta['samples']} samples per op; "
             f"variant `{meta['variant']}`; batched={meta['batch']}; lazy_mlir at {meta.get('git')}).\n")
    L.append("Status: **compiled** = every sample matched eager with no `aten::` fallback; "
             "**fallback** = matched, but some aten op ran eagerly; **mismatch** = wrong "
             "values/shape/dtype (silent wrong answer); **error** = raised where eager did not "
             "(or hung/crashed); **no_samples** = eager CPU raised on every sample.\n")
    L.append("## Totals\n")
    L.append("| dtype | op_db ops (dtype supported) | swept | compiled | fallback | mismatch | "
             "error | no_samples | skipped | compiled % of op_db | compiled % of run | "
             "matching % of run |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for dt in ("float32", "int64", "bool"):
        if dt not in tot:
            continue
        t = tot[dt]
        c = t["counts"]
        L.append(f"| {dt} | {t['op_db_ops_supporting_dtype']} | {t['swept']} | "
                 f"{c.get('compiled', 0)} | {c.get('fallback', 0)} | {c.get('mismatch', 0)} | "
                 f"{c.get('error', 0)} | {c.get('no_samples', 0)} | {c.get('skipped', 0)} | "
                 f"{t['compiled_pct_of_op_db']}% | {t['compiled_pct_of_run']}% | "
                 f"{t['matching_pct_of_run']}% |")
    L.append("")
    L.append("*compiled % of op_db* counts ops not swept as not compiled; *run* excludes "
             "skipped / no_samples ops; *matching* = compiled + fallback.\n")

    mism = [r for r in results if r["status"] == "mismatch"]
    L.append(f"## Mismatches ({len(mism)})\n")
    if mism:
        L.append("| op | dtype | sample | output | error |")
        L.append("|---|---|---|---|---|")
        for r in sorted(mism, key=lambda r: (r["op"], r["dtype"])):
            for m in r["mismatches"]:
                L.append(f"| {r['op']} | {r['dtype']} | #{m['sample']} `{_short(m['desc'], 120)}` | "
                         f"{m.get('output', '')} | {_short(_fmt_err(m), 140)} |")
        L.append("")
        notes = [(r["op"], r["dtype"], n) for r in mism for n in r.get("notes", ())]
        for op, dt, n in notes:
            L.append(f"- {op} {dt}: {n}")
        L.append("")

    errs = [r for r in results if r["status"] == "error"]
    L.append(f"## Errors ({len(errs)}), grouped by cause\n")
    groups = collections.defaultdict(list)
    for r in errs:
        e = r["errors"][0] if r.get("errors") else {"cause": r.get("cause", "?"), "message": ""}
        groups[_group_cause(e["cause"])].append((r, e))
    for cause, items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        L.append(f"### {_short(cause, 160)} ({len(items)})\n")
        e0 = items[0][1]
        if e0.get("message"):
            L.append(f"Example: `{items[0][0]['op']}` {items[0][0]['dtype']} sample #{e0.get('sample')} "
                     f"`{_short(e0.get('desc', ''), 100)}`: {e0.get('type')}: "
                     f"{_short(e0['message'], 300)}" + (f" (at `{e0['where']}`)" if e0.get("where") else "")
                     + "\n")
        L.append(", ".join(f"`{r['op']}` ({r['dtype']})" for r, _ in items) + "\n")

    fbs = [r for r in results if r["status"] == "fallback"]
    L.append(f"## Fallbacks ({len(fbs)}), grouped by cause\n")
    by_cause = collections.defaultdict(lambda: collections.defaultdict(set))
    for r in fbs:
        for aten_op, cause in r.get("fallback_ops", {}).items():
            by_cause[_group_cause(cause)][aten_op].add(f"{r['op']} ({r['dtype']})")
    for cause, atens in sorted(by_cause.items(), key=lambda kv: -sum(len(v) for v in kv[1].values())):
        L.append(f"### {_short(cause, 200)}\n")
        L.append("| aten op | OpInfo ops |")
        L.append("|---|---|")
        for a, ops in sorted(atens.items()):
            L.append(f"| `aten::{a}` | {_short(', '.join(sorted(ops)), 400)} |")
        L.append("")

    other = [r for r in results if r["status"] in ("skipped", "no_samples")]
    if other:
        L.append(f"## Not run ({len(other)})\n")
        for r in sorted(other, key=lambda r: (r["status"], r["op"], r["dtype"])):
            L.append(f"- `{r['op']}` ({r['dtype']}): {r['status']}: {_short(r.get('cause', ''), 160)}")
        L.append("")
    noted = [(r, n) for r in results for n in r.get("notes", ())
             if "hung once" in n or "one graph" in n or "ties" in n or "they differ" in n]
    if noted:
        L.append("## Notes\n")
        L.append("Hung samples are retried once (lazy_mlir's runtime worker can deadlock at "
                 "random); values of random ops are not counted; index outputs may differ "
                 "among equal values.\n")
        for r, n in sorted(noted, key=lambda x: (x[0]["op"], x[0]["dtype"])):
            L.append(f"- `{r['op']}` ({r['dtype']}): {_short(n, 200)}")
        L.append("")

    L.append("## Per-op results\n")
    dts = [d for d in ("float32", "int64", "bool") if d in tot]
    L.append("| op | " + " | ".join(dts) + " |")
    L.append("|---|" + "---|" * len(dts))
    by_op = collections.defaultdict(dict)
    for r in results:
        by_op[r["op"]][r["dtype"]] = r
    for op in sorted(by_op):
        cells = []
        for dt in dts:
            r = by_op[op].get(dt)
            if r is None:
                cells.append("")
                continue
            s = r["status"]
            if s == "fallback":
                s += " (" + ", ".join(sorted(r.get("fallback_ops", {}))) + ")"
            elif s == "error":
                s += ": " + _short(r.get("cause", ""), 60)
            elif s == "mismatch":
                s = "**mismatch**: " + _short(_fmt_err(r["mismatches"][0]), 60)
            elif s == "skipped":
                s += ": " + _short(r.get("cause", ""), 40)
            cells.append(_short(s, 110))
        L.append(f"| {op} | " + " | ".join(cells) + " |")
    L.append("")
    return "\n".join(L)


def _git_state() -> str:
    """HEAD and the lazy_mlir files that differ from it (the code swept)."""
    import subprocess
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--short", "--", "lazy_mlir"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.split("\n")
        dirty = [d.strip() for d in dirty if d.strip()]
        return head + (f" + {len(dirty)} changed lazy_mlir file(s)" if dirty else "")
    except Exception:  # noqa: BLE001
        return "?"


def report(results: list[dict], args, out_md: str | None, out_json: str | None) -> dict:
    import torch
    all_ops = sweep.select_ops()
    tot = totals(results, all_ops)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "torch": torch.__version__, "samples": args.samples, "variant": args.variant,
            "batch": not args.no_batch, "op_db_ops": len(all_ops), "git": _git_state()}
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"meta": meta, "totals": tot,
                       "results": sorted(results, key=lambda r: (r["op"], r["dtype"]))}, f, indent=1)
    if out_md:
        with open(out_md, "w") as f:
            f.write(markdown(results, meta, tot))
    for dt, t in tot.items():
        print(f"{dt}: {t['swept']} swept of {t['op_db_ops_supporting_dtype']}: {t['counts']}; "
              f"compiled {t['compiled_pct_of_op_db']}% of op_db, {t['compiled_pct_of_run']}% of run",
              file=sys.stderr)
    return tot


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", help="comma list of op names, or a regex (re.search)")
    p.add_argument("--limit-ops", type=int, help="only the first N ops (alphabetical)")
    p.add_argument("--samples", type=int, default=3, help="samples per op (default 3)")
    p.add_argument("--dtypes", default="float32,int64,bool",
                   help="comma list of float32,int64,bool (default all three)")
    p.add_argument("--variant", default="op", choices=["op", "method", "inplace"])
    p.add_argument("--jobs", type=int, default=1, help="worker subprocesses (default 1)")
    p.add_argument("--timeout", type=float, default=sweep.SAMPLE_TIMEOUT,
                   help="seconds without progress before a sample counts as hung")
    p.add_argument("--no-batch", action="store_true",
                   help="one graph per sample (default: one graph per op, re-run per sample "
                        "when not clean)")
    p.add_argument("--in-process", action="store_true", help="no worker subprocesses")
    p.add_argument("--jsonl", default=os.path.join(tempfile.gettempdir(), "lazy-mlir-op-coverage.jsonl"),
                   help="append results here as they come")
    p.add_argument("--resume", action="store_true", help="skip (op, dtype) already in --jsonl")
    p.add_argument("--rerun", metavar="STATUSES",
                   help="with --resume: run again the (op, dtype) whose status is one of these "
                        "(comma list, e.g. error,mismatch); the new result replaces the old")
    p.add_argument("--report-only", action="store_true", help="report on --jsonl; run nothing")
    p.add_argument("--out-md", help="markdown report")
    p.add_argument("--out-json", help="JSON report")
    args = p.parse_args(argv)

    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    for d in dtypes:
        if d not in sweep.DTYPES:
            p.error(f"unknown dtype {d!r}")
    ops = sweep.select_ops(args.ops, args.limit_ops)
    previous = read_jsonl(args.jsonl) if (args.resume or args.report_only) else []
    if not args.report_only:
        if not args.resume and args.jsonl and os.path.exists(args.jsonl):
            os.remove(args.jsonl)
        again = set((args.rerun or "").split(",")) - {""}
        done = {(r["op"], r["dtype"], r.get("variant", "op")) for r in previous
                if r["status"] not in again}
        new = run(ops, dtypes, args.samples, args.jobs, args.timeout, args.variant,
                  not args.no_batch, args.jsonl or None, done, args.in_process)
        results = read_jsonl(args.jsonl) if args.jsonl else previous + new
    else:
        results = previous
    wanted = set(ops)
    results = [r for r in results if r["op"] in wanted and r["dtype"] in dtypes
               and r.get("variant", "op") == args.variant]
    # Ops whose dtype the OpInfo does not support are not results.
    results = [r for r in results if r["status"] != "unsupported_dtype"]
    report(results, args, args.out_md, args.out_json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
