"""Running programs eagerly and on the lazy device, and comparing.

Many programs share one graph (no mark_step between them), so a corpus of
hundreds costs a few compiles. What is compared, per program: which records
raise (the lazy device must raise at the call, as eager does), every
variable's dtype and shape, the strides of inputs and views of them, every
variable's value after the program (so a write through one view must show
through every other: the aliasing a user sees), host reads mid-program, and
``.grad`` after autograd. A graph that fails to compile and runs eagerly
(``EagerGraph``, ``DynamoEagerGraph``) is a finding too. ``lm.jit`` and
``torch.compile(backend="lazy_mlir")`` run the programs with no host reads,
autograd or raising records, as one function per batch.
"""
from __future__ import annotations

import dataclasses
import re
import warnings

import torch

import lazy_mlir as lm

from .program import Program, compiled, function_source, is_refusal, namespace, run_ops

FALLBACK_COUNTERS = ("EagerGraph", "DynamoEagerGraph")
# What torch.compile refuses in every backend (aot_autograd's functionalization):
# not a finding of this one (nor a value torch.compile's aot_eager computes too).
UPSTREAM_REFUSALS = ("as_strided() is non-compositional",)


@dataclasses.dataclass
class Finding:
    seed: int
    mode: str     # "lazy", "jit", "dynamo"
    kind: str     # "value", "dtype", "shape", "stride", "raise", "crash", "fallback"
    detail: str
    program: Program

    def summary(self) -> str:
        return f"seed {self.seed} [{self.mode}] {self.kind}: {self.detail}"


@dataclasses.dataclass
class Outcome:
    vars: dict
    reads: list
    raised: list
    grads: dict


def _outcome(prog: Program, ns: dict, raised: list) -> Outcome:
    vs = {i: ns[f"v{i}"] for i in prog.var_ids() if f"v{i}" in ns}
    grads = {k: ns[f"v{k}"].grad for k, inp in enumerate(prog.inputs) if inp.grad}
    return Outcome(vs, ns["reads"], raised, grads)


def run_eager(prog: Program) -> Outcome:
    ns, raised = run_ops(prog, "cpu")
    return _outcome(prog, ns, raised)


def differ(actual: torch.Tensor, expected: torch.Tensor, strides: bool = False) -> str | None:
    """Where ``actual`` (on the host) differs from eager's ``expected``."""
    if actual.dtype != expected.dtype:
        return f"dtype {actual.dtype} != eager {expected.dtype}"
    if actual.shape != expected.shape:
        return f"shape {tuple(actual.shape)} != eager {tuple(expected.shape)}"
    if strides and _strides(actual) != _strides(expected):
        return f"stride {actual.stride()} != eager {expected.stride()}"
    return None


def _strides(t: torch.Tensor) -> tuple:
    """Strides of the dimensions longer than 1 (the others' address nothing)."""
    return tuple(st for n, st in zip(t.shape, t.stride()) if n > 1) if t.numel() else ()


def value_differ(actual: torch.Tensor, expected: torch.Tensor) -> str | None:
    tol = {} if expected.is_floating_point() else dict(rtol=0, atol=0)
    try:
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True,
                                   check_stride=False, **tol)
    except AssertionError as e:
        return " ".join(str(e).split())[:300]
    return None


def _reads_differ(lazy: list, eager: list) -> str | None:
    if len(lazy) != len(eager):
        return f"{len(lazy)} host reads, eager {len(eager)}"
    for k, (a, e) in enumerate(zip(lazy, eager)):
        if isinstance(e, torch.Tensor):
            why = differ(a, e) or value_differ(a, e)
        else:
            why = None if _same_py(a, e) else f"{a!r} != eager {e!r}"
        if why:
            return f"host read {k}: {why}"
    return None


def _same_py(a, e) -> bool:
    if isinstance(e, list):
        return isinstance(a, list) and len(a) == len(e) and all(map(_same_py, a, e))
    if isinstance(e, float) and isinstance(a, float):
        return abs(a - e) <= 1e-5 + 1e-3 * abs(e) or (a != a and e != e)
    return type(a) is type(e) and a == e


def _counters() -> dict:
    return {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}


def _moved(before: dict, names) -> dict:
    return {n: lm.metrics.counter_value(n) - before.get(n, 0) for n in names
            if lm.metrics.counter_value(n) - before.get(n, 0)}


def check_lazy(progs: list[Program]) -> list[Finding]:
    """Run ``progs`` on the lazy device in one batch (one mark_step) and
    compare each with eager. A batch that raises or falls back is halved
    until the program to blame is alone."""
    eager = [run_eager(p) for p in progs]
    before = _counters()
    findings, snaps = [], []
    try:
        for prog, e in zip(progs, eager):
            ns, raised = run_ops(prog, "lazy")
            if set(ns.get("refused", ())) - set(e.raised):
                continue  # a documented refusal where eager computes (program.REFUSALS)
            lz = _outcome(prog, ns, raised)
            findings += _compare_meta(prog, lz, e)
            snaps.append((prog, e, _snapshot(lz)))
        lm.mark_step()
        hosts = [(prog, e, _to_host(vs, grads)) for prog, e, (vs, grads) in snaps]
    except Exception as ex:  # noqa: BLE001 - a raise at sync or read is a finding
        _safe_mark_step()
        if len(progs) > 1:
            return _halves(progs, check_lazy)
        return findings + [Finding(progs[0].seed, "lazy", "crash",
                                   f"{type(ex).__name__}: {_short(ex)}", progs[0])]
    fell = _moved(before, FALLBACK_COUNTERS)
    if fell and len(progs) > 1:
        return _halves(progs, check_lazy)
    for prog, e, (vs, grads) in hosts:
        findings += _compare_values(prog, "lazy", vs, grads, e)
    if fell:
        findings.append(Finding(progs[0].seed, "lazy", "fallback", str(fell), progs[0]))
    return findings


def _halves(progs, check_fn, *args):
    h = len(progs) // 2
    return check_fn(progs[:h], *args) + check_fn(progs[h:], *args)


def _short(ex: Exception) -> str:
    lines = [ln for ln in str(ex).splitlines() if ln.strip()]
    return " ".join(lines[-1:] if len(lines) > 3 else lines)[:300]


def _to_host(vs: dict, grads: dict):
    return ({i: t.cpu() for i, t in vs.items()},
            {k: (g.cpu() if g is not None else None) for k, g in grads.items()})


def _safe_mark_step() -> None:
    try:
        lm.mark_step()
    except Exception:  # noqa: BLE001 - leave the device clean for the next batch
        pass


def _snapshot(lz: Outcome):
    """Clones of every variable and gradient (one graph computes them all)."""
    vs = {i: t.detach().clone() for i, t in lz.vars.items()}
    grads = {k: (g.clone() if g is not None else None) for k, g in lz.grads.items()}
    return vs, grads


def _compare_meta(prog: Program, lz: Outcome, e: Outcome) -> list[Finding]:
    out = []
    if lz.raised != e.raised:
        out.append(Finding(prog.seed, "lazy", "raise",
                           f"records raising: lazy {lz.raised}, eager {e.raised}", prog))
    why = _reads_differ(lz.reads, e.reads)
    if why:
        out.append(Finding(prog.seed, "lazy", "value", why, prog))
    strided = prog.strided_ids()
    for i, et in e.vars.items():
        lt = lz.vars.get(i)
        if lt is None:
            continue
        why = differ(lt, et, strides=i in strided and lt.device.type == "lazy")
        if why:
            out.append(Finding(prog.seed, "lazy", why.split()[0], f"v{i}: {why}", prog))
    return out


def _compare_values(prog, mode, vs: dict, grads: dict, e: Outcome) -> list[Finding]:
    out = []
    for i, et in e.vars.items():
        if i not in vs:
            continue
        why = differ(vs[i], et) or value_differ(vs[i], et)
        if why:
            out.append(Finding(prog.seed, mode, "value", f"v{i}: {why}", prog))
    for k, g in e.grads.items():
        lg = grads.get(k)
        if (g is None) != (lg is None):
            out.append(Finding(prog.seed, mode, "value", f"v{k}.grad: {lg is None=}, eager "
                               f"{g is None=}", prog))
        elif g is not None:
            why = value_differ(lg, g)
            if why:
                out.append(Finding(prog.seed, mode, "value", f"v{k}.grad: {why}", prog))
    return out


# ---------------------------------------------------------- jit and dynamo
def _inputs(progs: list[Program]) -> list[torch.Tensor]:
    ns = namespace("cpu", [])
    return [eval(compiled_expr(i.source("'cpu'")), ns) for p in progs for i in p.inputs]


def compiled_expr(src: str):
    return compile(src, "<fuzz input>", "eval")


def check_function(progs: list[Program], mode: str) -> list[Finding]:
    """Run functional ``progs`` as one function through ``lm.jit`` or
    ``torch.compile(backend="lazy_mlir")`` on CPU tensors, compared with the
    function run eagerly (for torch.compile: the inputs it wrote too)."""
    progs = [p for p in progs if p.functional]
    if not progs:
        return []
    src, results = function_source(progs)
    ns = namespace("cpu", [])
    exec(compile(src, f"<fuzz {mode}>", "exec"), ns)
    fn = ns["fuzz_fn"]
    before = _counters()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = fn(*_inputs(progs))
        try:
            if mode == "jit":
                actual = lm.jit(fn).lower(*_inputs(progs)).compile()(*_inputs(progs))
            else:
                from lazy_mlir.frontends import dynamo
                dynamo.register()
                torch._dynamo.reset()
                actual = torch.compile(fn, backend="lazy_mlir")(*_inputs(progs))
        except Exception as ex:  # noqa: BLE001
            if len(progs) > 1:
                return _halves(progs, check_function, mode)
            if any(why in str(ex) for why in UPSTREAM_REFUSALS) or is_refusal(ex) or (
                    mode == "dynamo" and _aot_eager_raises(fn, progs, ex)):
                return []
            return [Finding(progs[0].seed, mode, "crash",
                            f"{type(ex).__name__}: {_short(ex)}", progs[0])]
    fell = _moved(before, FALLBACK_COUNTERS)
    if fell and len(progs) > 1:
        return _halves(progs, check_function, mode)
    findings = []
    upstream = None
    for k, ((p, i), a, e) in enumerate(zip(results, actual, expected)):
        why = differ(a, e) or value_differ(a, e)
        if why and mode == "dynamo":
            upstream = _aot_eager(fn, progs) if upstream is None else upstream
            if differ(a, upstream[k]) is None and value_differ(a, upstream[k]) is None:
                continue  # torch.compile's own value (aot_autograd): not this backend's
        if why:
            findings.append(Finding(progs[p].seed, mode, "value", f"v{i}: {why}", progs[p]))
    if fell:
        findings.append(Finding(progs[0].seed, mode, "fallback", str(fell), progs[0]))
    return findings


def _aot_eager(fn, progs: list[Program]) -> list:
    """``fn``'s results under ``torch.compile(backend="aot_eager")``: what
    torch.compile computes with no backend of ours (it loses a write into a
    0-d float64 argument, for one)."""
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.compile(fn, backend="aot_eager")(*_inputs(progs))


def _aot_eager_raises(fn, progs: list[Program], ex: Exception) -> bool:
    """Whether torch.compile raises ``ex`` with no backend of ours too
    (aot_autograd refuses a write through a view with internal overlap,
    seed 700036): torch.compile's own refusal, not this backend's."""
    try:
        _aot_eager(fn, progs)
    except Exception as theirs:  # noqa: BLE001
        return type(theirs) is type(ex) and _unnamed(theirs) == _unnamed(ex)
    return False


def _unnamed(ex: Exception) -> str:
    """``_short(ex)`` without the backend's name: Dynamo wraps an error in
    "backend='<name>' raised:" (seed 940308: aot_autograd's own "Cannot
    view a tensor" under both backends)."""
    return re.sub(r"backend='[^']*'", "backend=...", _short(ex))


def check(progs: list[Program], modes=("lazy", "jit", "dynamo"), batch: int = 40):
    """Every finding of ``progs`` in ``modes``, ``batch`` programs per graph."""
    findings = []
    for k in range(0, len(progs), batch):
        chunk = progs[k:k + batch]
        for mode in modes:
            findings += check_lazy(chunk) if mode == "lazy" else check_function(chunk, mode)
    return findings


__all__ = ["Finding", "check", "check_lazy", "check_function", "compiled", "run_eager"]
