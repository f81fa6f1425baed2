"""Run PyTorch's OpInfo samples (``op_db``) on the lazy device; compare with eager CPU.

Shared by ``benchmarks/op_coverage.py`` (the full sweep and its report) and
``tests/e2e/test_opinfo.py`` (the CI guard on a fixed set of ops).

Each (op, dtype) is classified as:

``compiled``  every sample matched eager CPU and nothing fell back;
``fallback``  every sample matched, but some aten op ran eagerly (``aten::``
              counters; ``fallback_ops`` maps each to its cause);
``mismatch``  a sample gave a wrong value, shape or dtype (a silent wrong
              answer: the worst case);
``error``     a sample raised on the lazy device where eager CPU did not
              (or hung, or killed the process);
``skipped``   listed in ``opinfo_skips.SKIPS``;
``no_samples`` the op has no sample that eager CPU runs for this dtype.

Samples of one op are first recorded into one graph (one compile); when that
is not clean they are run again one graph per sample, so each problem is
blamed on its own sample (``run_op(batch=False)`` does only the latter).

Comparison: ``torch.testing.assert_close(equal_nan=True)``; float results
within rtol=1.3e-4 / atol=1e-5 (float32), widened by the OpInfo's own
``toleranceOverride``s; integer and bool results exactly. Values of
dropout (``opinfo_skips.METADATA_ONLY``: its mask is drawn in the graph) and
of dropout samples with p > 0 are not counted (shape and dtype are); other
random ops draw eager's numbers and are compared; index outputs of sort/topk/argmax/... that
pick equal values from the input (ties) are accepted. A mismatch that shows
only when all samples share one graph still counts (uninitialized memory,
or samples interfering).

``run_op`` runs in the calling process; ``Worker`` runs ops in a subprocess
with a per-sample timeout: a sample that kills the process, or hangs twice,
is recorded as an error and the op goes on without it.
"""
from __future__ import annotations

import gc
import itertools
import logging
import math
import multiprocessing
import os
import re
import signal
import sys
import time
import traceback
import types
import warnings
from contextlib import contextmanager

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
# Sweep the lazy_mlir of this checkout, whatever an editable install points at.
REPO = os.path.dirname(os.path.dirname(HERE))
if os.path.isdir(os.path.join(REPO, "lazy_mlir")) and REPO not in sys.path:
    sys.path.insert(0, REPO)

from opinfo_skips import METADATA_ONLY, SKIPS  # noqa: E402

DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}
SAMPLE_TIMEOUT = 60.0  # seconds without progress before a sample counts as hung

# Default comparison tolerances (max'ed with the OpInfo's own overrides).
FLOAT_TOL = {torch.float32: (1.3e-4, 1e-5), torch.float64: (1e-7, 1e-7),
             torch.float16: (1e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-5)}
LOOSE_TOL = (1e-2, 1e-3)  # a mismatch within these is reported as severity "small"

# Ops whose output size depends on the values of their inputs.
DATA_DEPENDENT = {"nonzero", "nonzero_static", "argwhere", "masked_select", "unique",
                  "unique_consecutive", "repeat_interleave", "bincount", "histc",
                  "histogram", "histogramdd", "combinations", "_unique2", "unique_dim"}


# ----------------------------------------------------------------- op_db
def _ensure_expecttest() -> None:
    """``torch.testing._internal`` imports ``expecttest`` (a test-only package);
    without it, a stand-in with the one class it uses is enough here."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import unittest
        mod = types.ModuleType("expecttest")

        class TestCase(unittest.TestCase):
            def assertExpectedInline(self, *a, **k):  # pragma: no cover
                raise unittest.SkipTest("expecttest is not installed")

        mod.TestCase = TestCase
        sys.modules["expecttest"] = mod


_OPS: dict | None = None


def op_db() -> dict:
    """``op name -> OpInfo``, names as ``name`` or ``name.variant_test_name``."""
    global _OPS
    if _OPS is None:
        _ensure_expecttest()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db as db
        _OPS = {op_name(o): o for o in db}
    return _OPS


def op_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def select_ops(spec: str | None = None, limit: int | None = None) -> list[str]:
    """Op names, alphabetical. ``spec``: a comma list of names, or a regex
    (``re.search``) when it is not a list of known names."""
    names = sorted(op_db())
    if spec:
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        if all(p in op_db() for p in parts):
            names = parts
        else:
            rx = re.compile(spec)
            names = [n for n in names if rx.search(n)]
    return names[:limit] if limit else names


def supports(name: str, dtype: torch.dtype) -> bool:
    return dtype in op_db()[name].supported_dtypes("cpu")


def tolerance(op, dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol): our defaults, widened by the OpInfo's toleranceOverrides."""
    rtol, atol = FLOAT_TOL.get(dtype, (0.0, 0.0))
    if not dtype.is_floating_point:
        return 0.0, 0.0
    for info in getattr(op, "decorators", ()) or ():
        for d in getattr(info, "decorators", ()):
            overrides = getattr(d, "d", None)
            if type(d).__name__ == "toleranceOverride" and isinstance(overrides, dict):
                t = overrides.get(dtype)
                if t is not None:
                    atol, rtol = max(atol, t.atol), max(rtol, t.rtol)
    return rtol, atol


# --------------------------------------------------------------- samples
def _desc(x, depth=0) -> str:
    if isinstance(x, torch.Tensor):
        dt = {torch.float32: "f32", torch.float64: "f64", torch.int64: "i64", torch.bool: "b8",
              torch.int32: "i32", torch.uint8: "u8", torch.float16: "f16"}.get(x.dtype, str(x.dtype))
        s = f"{dt}{list(x.shape)}"
        if x.layout != torch.strided:
            return s + f"({str(x.layout).replace('torch.', '')})"
        if x.numel() and not x.is_contiguous():
            s += "(noncontig)"
        return s
    if isinstance(x, (list, tuple)):
        inner = ", ".join(_desc(y, depth + 1) for y in list(x)[:6])
        if len(x) > 6:
            inner += ", ..."
        return f"[{inner}]" if isinstance(x, list) else f"({inner})"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{k}={_desc(v, depth + 1)}" for k, v in x.items()) + "}"
    r = repr(x)
    return r if len(r) < 40 else r[:37] + "..."


def describe_sample(sample) -> str:
    parts = [f"input={_desc(sample.input)}"]
    if sample.args:
        parts.append(f"args={_desc(tuple(sample.args))}")
    if sample.kwargs:
        parts.append(f"kwargs={_desc(dict(sample.kwargs))}")
    if getattr(sample, "name", ""):
        parts.append(f"name={sample.name!r}")
    return " ".join(parts)


# Ops whose OpInfo samples pass a tensor that the op requires on the host
# (as with CUDA): op name -> positions in sample.args kept on the CPU.
HOST_ARGS: dict[str, tuple[int, ...]] = {"tensor_split": (0,)}


def lazy_args(name: str, sample):
    """(input, args, kwargs) of a sample, moved to the lazy device."""
    keep = HOST_ARGS.get(name, ())
    args = tuple(a.detach().clone() if (j in keep and isinstance(a, torch.Tensor)) else to_lazy(a)
                 for j, a in enumerate(sample.args))
    return to_lazy(sample.input), args, to_lazy(dict(sample.kwargs))


def to_lazy(x, key=None):
    """A lazy copy of every tensor in ``x`` (nested lists, tuples, dicts);
    ``device=`` arguments naming the CPU become the lazy device."""
    if isinstance(x, torch.Tensor):
        return x.detach().to("lazy")
    if isinstance(x, list):
        return [to_lazy(y) for y in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(to_lazy(y) for y in x)
    if isinstance(x, dict):
        return {k: to_lazy(v, k) for k, v in x.items()}
    if key == "device" and x is not None and torch.device(x).type == "cpu":
        return torch.device("lazy")
    return x


def clone_tree(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, list):
        return [clone_tree(y) for y in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(clone_tree(y) for y in x)
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items()}
    return x


def flatten_out(x) -> list:
    """Leaves of an op's result (tensors and Python values), in order."""
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):  # includes torch.return_types
        return [leaf for y in x for leaf in flatten_out(y)]
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in flatten_out(x[k])]
    return [x]


def variant_fn(op, variant: str):
    if variant == "op":
        return op.op
    if variant == "method":
        return op.method_variant
    if variant == "inplace":
        return op.inplace_variant
    raise ValueError(variant)


# ------------------------------------------------------------- comparing
class Mismatch(Exception):
    def __init__(self, what: str, **info):
        super().__init__(what)
        self.info = {"what": what, **info}


def _errors(a: torch.Tensor, e: torch.Tensor, rtol: float = 0.0, atol: float = 0.0) -> dict:
    """Max abs / rel error and the number of elements outside the tolerance."""
    if a.shape != e.shape:
        return {}
    if a.is_complex() and e.is_complex():
        a, e = torch.view_as_real(a.resolve_conj()), torch.view_as_real(e.resolve_conj())
    if not (a.dtype.is_floating_point or e.dtype.is_floating_point):
        diff = a.to(torch.int64) != e.to(torch.int64) if a.dtype != torch.bool else a != e
        return {"n_bad": int(diff.sum()), "numel": e.numel(),
                "max_abs": float((a.double() - e.double()).abs().max()) if e.numel() else 0.0}
    a, e = a.double(), e.double()
    both_nan = a.isnan() & e.isnan()
    same_inf = (a == e)
    d = (a - e).abs()
    d = torch.where(both_nan | same_inf, torch.zeros_like(d), d)
    d = torch.where(d.isnan(), torch.full_like(d, math.inf), d)  # one NaN, one not
    rel = d / e.abs().clamp_min(1e-12)
    return {"max_abs": float(d.max()) if d.numel() else 0.0,
            "max_rel": float(rel.max()) if rel.numel() else 0.0,
            "n_bad": int((d > atol + rtol * e.abs().nan_to_num(0, 0, 0)).sum()), "numel": e.numel()}


def compare_leaf(i: int, actual, expected, rtol: float, atol: float, values: bool = True) -> None:
    """Raise ``Mismatch`` unless the lazy ``actual`` equals the eager ``expected``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch("type", output=i, actual=type(actual).__name__, expected="Tensor")
        if actual.dtype != expected.dtype:
            raise Mismatch("dtype", output=i, actual=str(actual.dtype), expected=str(expected.dtype))
        if tuple(actual.shape) != tuple(expected.shape):
            raise Mismatch("shape", output=i, actual=list(actual.shape), expected=list(expected.shape))
        host = actual.cpu() if actual.device.type != "cpu" else actual
        if tuple(host.shape) != tuple(expected.shape) or host.dtype != expected.dtype:
            raise Mismatch("synced shape/dtype", output=i, actual=f"{host.dtype}{list(host.shape)}",
                           expected=f"{expected.dtype}{list(expected.shape)}")
        if not values:
            return
        # Tolerances follow the dtype of the result (an int64 input can give
        # a float32 result); integer and bool results must be exact.
        if expected.dtype.is_floating_point or expected.dtype.is_complex:
            d_rtol, d_atol = FLOAT_TOL.get(expected.dtype, FLOAT_TOL[torch.float32])
            rtol, atol = max(rtol, d_rtol), max(atol, d_atol)
        else:
            rtol, atol = 0.0, 0.0
        try:
            torch.testing.assert_close(host, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_device=False, check_stride=False)
        except AssertionError as err:
            info = _errors(host, expected, rtol, atol)
            lr, la = LOOSE_TOL
            small = (expected.dtype.is_floating_point
                     and torch.allclose(host.double(), expected.double(), rtol=lr, atol=la,
                                        equal_nan=True))
            raise Mismatch("values", output=i, severity="small" if small else "large",
                           detail=str(err).strip().splitlines()[0][:200], **info) from None
        return
    if isinstance(actual, torch.Tensor):
        actual = actual.cpu().item() if actual.numel() == 1 else actual.cpu().tolist()
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        if math.isnan(expected) and math.isnan(actual):
            return
        if math.isclose(actual, expected, rel_tol=max(rtol, 1e-6), abs_tol=atol):
            return
    if actual != expected or type(actual) is not type(expected):
        raise Mismatch("python value", output=i, actual=repr(actual)[:80], expected=repr(expected)[:80])


def compare(actual, expected, rtol, atol, values=True, rescue=None) -> list[str]:
    """Raise ``Mismatch`` at the first output that differs, unless
    ``rescue(i, actual_leaf, expected_leaf)`` accepts it (returns a note)."""
    a, e = flatten_out(actual), flatten_out(expected)
    if len(a) != len(e):
        raise Mismatch("structure", actual=len(a), expected=len(e))
    notes = []
    for i, (x, y) in enumerate(zip(a, e)):
        try:
            compare_leaf(i, x, y, rtol, atol, values)
        except Mismatch:
            note = rescue(i, x, y) if rescue is not None else None
            if not note:
                raise
            notes.append(note)
    return notes


# Ops with an index output that may differ from eager among equal values
# (ties): op name -> position in sample.args of ``dim`` (``kwargs['dim']``
# wins; None: the op takes no dim and its indices are into the flattened input).
TIE_OPS: dict[str, int | None] = {
    "sort": 0, "argsort": 0, "topk": 1, "kthvalue": 1, "max.reduction_with_dim": 0,
    "min.reduction_with_dim": 0, "median": 0, "nanmedian": 0, "mode": 0, "cummax": 0,
    "cummin": 0, "argmax": 0, "argmin": 0}


def tie_rescue(name: str, sample):
    """A ``compare`` rescue for TIE_OPS: lazy indices that pick the same
    values from the input as eager's indices are right."""
    if name not in TIE_OPS or not isinstance(sample.input, torch.Tensor) or \
            sample.kwargs.get("stable"):
        return None
    x = sample.input
    pos = TIE_OPS[name]
    dim = sample.kwargs.get("dim")
    if dim is None and pos is not None and len(sample.args) > pos and \
            isinstance(sample.args[pos], int) and not isinstance(sample.args[pos], bool):
        dim = sample.args[pos]
    if dim is None and name not in ("argmax", "argmin"):
        dim = -1  # the default dim of sort, topk, kthvalue, mode, ...

    def rescue(i, a, e):
        if not (isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
                and e.dtype == torch.int64 and a.dtype == e.dtype and a.shape == e.shape):
            return None
        ai = a.cpu()
        if x.dim() == 0:
            ok = bool((ai == 0).all())
        elif dim is None:
            flat = x.flatten()
            if ai.numel() and (ai.min() < 0 or ai.max() >= flat.numel()):
                return None
            ok = torch.equal(flat[ai], flat[e]) or torch.allclose(flat[ai], flat[e], equal_nan=True)
        else:
            d = dim % x.dim()
            ei = e
            if ai.dim() < x.dim():
                ai, ei = ai.unsqueeze(d), e.unsqueeze(d)
            if ai.numel() and (ai.min() < 0 or ai.max() >= x.shape[d]):
                return None
            va, ve = torch.take_along_dim(x, ai, d), torch.take_along_dim(x, ei, d)
            ok = va.shape == ve.shape and (torch.equal(va, ve) or bool(
                (va.isnan() & ve.isnan() | (va == ve)).all()) if va.is_floating_point() else
                torch.equal(va, ve))
        return "indices differ from eager only among equal values (ties)" if ok else None
    return rescue


def random_sample(name: str, sample) -> str | None:
    """Why this sample's values are random (dropout with p > 0), if they are."""
    p = sample.kwargs.get("dropout_p")
    if isinstance(p, float) and p > 0:
        return f"dropout_p={p}: the lazy device draws its dropout mask in the graph"
    if name == "nn.functional.multi_head_attention_forward" and sample.kwargs.get("training") \
            and len(sample.args) > 9 and isinstance(sample.args[9], float) and sample.args[9] > 0:
        return f"dropout_p={sample.args[9]} in training: random"
    return None


# ----------------------------------------------------- probing lazy_mlir
def _first_line(msg: str, n: int = 240) -> str:
    for line in str(msg).splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= n else line[: n - 3] + "..."
    return ""


def _repro_detail(msg: str) -> str:
    """For an iree-compile failure whose message says only that the tool
    failed: its exit signal and first error, from the repro's error.txt."""
    m = re.search(r"repro: (\S+)/[^/\s]+\.mlir", msg)
    if not m:
        return ""
    try:
        with open(os.path.join(m.group(1), "error.txt")) as f:
            text = f.read(200_000)
    except OSError:
        return ""
    out = []
    code = re.search(r"Error code: (-?\d+)", text)
    if code and int(code.group(1)) < 0:
        out.append(f"iree-compile crashed ({_exit_name(int(code.group(1)))})")
    err = next((ln.strip() for ln in text.splitlines() if "error:" in ln), None)
    if err:
        out.append(re.sub(r"<stdin>:\d+:\d+: ", "", err)[:160])
    elif code and int(code.group(1)) < 0:
        frame = re.search(r"#\d+ 0x[0-9a-f]+ (?:\S+ )?(\S*(?:Pass|pass)\S*)", text)
        if frame:
            out.append("in " + frame.group(1)[:100])
    return "; ".join(out)


def clean_cause(msg: str) -> str:
    """A compile-failure message without its IR excerpt and source positions,
    so that failures of one kind group together."""
    full = msg
    msg = _first_line(msg, 400)
    if "Error invoking IREE compiler tool" in msg:
        detail = _repro_detail(full)
        if detail:
            msg = msg.split("Error invoking")[0] + detail
    msg = re.sub(r'"-":\d+:\d+: ', "", msg)
    msg = re.sub(r"lazy-mlir: ", "", msg)
    msg = re.split(r": %\S+ = | \(repro: | repro ", msg)[0]
    msg = re.sub(r"\s+", " ", msg).strip()
    return msg if len(msg) <= 200 else msg[:197] + "..."


class _LogCatcher(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record):
        try:
            self.records.append(record.getMessage())
        except Exception:  # noqa: BLE001
            pass


# Compile failures seen by this process, op name (base) -> message: an op
# whose failed graph is reused from the cache is blamed with the same message.
_COMPILE_FAILURES: dict[str, str] = {}


class Probe:
    """Watches one (op, dtype): its eager fallbacks and why, compile failures.

    Ops denied by an earlier op's failed compile are allowed again, so each
    op's result does not depend on what ran before it in the process.
    """

    def __init__(self):
        import lazy_mlir as lm
        self.lm = lm
        self.handler = _LogCatcher()
        self.fallbacks: dict[str, str] = {}  # overload name -> cause

    def __enter__(self):
        from lazy_mlir.ops import support
        from lazy_mlir.lazy import fallback, supported
        self.support, self.fallback, self.supported = support, fallback, supported
        global _INITIAL_DENIED
        if _INITIAL_DENIED is None:
            _INITIAL_DENIED = dict(support.DENIED)
        support.DENIED.clear()
        support.DENIED.update(_INITIAL_DENIED)
        support.DENIED_SIGNATURES.clear()  # each op starts with no failed compiles
        logger = logging.getLogger("lazy_mlir")
        logger.addHandler(self.handler)
        self._real = getattr(fallback, "run_eagerly", None)
        if self._real is not None:
            real = self._real
            probe = self

            def run_eagerly(func, args, kwargs, **why):
                probe._note(func, args, kwargs, why.get("why"))
                return real(func, args, kwargs, **why)
            fallback.run_eagerly = run_eagerly
        self.lm.metrics.reset()
        return self

    def __exit__(self, *exc):
        logging.getLogger("lazy_mlir").removeHandler(self.handler)
        if self._real is not None:
            self.fallback.run_eagerly = self._real
        self.denied = {k: v for k, v in self.support.DENIED.items() if k not in (_INITIAL_DENIED or {})}
        for k, sigs in self.support.DENIED_SIGNATURES.items():
            self.denied.setdefault(k, next(iter(sigs.values())))
        for k, v in self.denied.items():
            _COMPILE_FAILURES[k.split(".")[0]] = v
        return False

    def _note(self, func, args, kwargs, why=None) -> None:
        try:
            name = func.__name__  # aten op name with overload: add.Tensor
            support = self.support
            mname = support.mlir_name(func)
            if why is not None:  # capture said why (data-dependent shape, dtype)
                cause = clean_cause(why)
            elif mname in support.DENIED:
                why = support.DENIED[mname]
                cause = why if why.startswith("compile failed") else f"denied: {why}"
                cause = clean_cause(cause)
            elif not support._static_support(func):
                cause = "not in torch dialect"
            elif not self.supported.supported(func, [a for a in _values(args, kwargs)]):
                cause = "unsupported dtype"
            elif func._schema.is_mutable:
                cause = "mutating op without a functional form"
            else:
                cause = "run eagerly (other)"
            self.fallbacks.setdefault(name, cause)
        except Exception as e:  # noqa: BLE001
            self.fallbacks.setdefault(getattr(func, "__name__", str(func)), f"? ({e})")

    def counters(self) -> dict[str, int]:
        m = self.lm.metrics
        return {n: m.counter_value(n) for n in m.counter_names()}

    def fallback_causes(self) -> dict[str, str]:
        """aten op (base name) -> cause, for every ``aten::`` counter."""
        compile_msgs = [r for r in self.handler.records
                        if not re.match(r"\s*(lazy-mlir: )?aten::\S+ runs eagerly", r)]
        out = {}
        for counter in self.counters():
            if not counter.startswith("aten::"):
                continue
            base = counter[len("aten::"):]
            causes = sorted({c for n, c in self.fallbacks.items() if n.split(".")[0] == base})
            if causes:
                out[base] = "; ".join(causes)
            elif any(k.split(".")[0] == base for k in self.denied):
                out[base] = clean_cause(next(v for k, v in self.denied.items()
                                             if k.split(".")[0] == base))
            elif compile_msgs:
                out[base] = "compile failed: " + clean_cause(compile_msgs[0])
            elif base in _COMPILE_FAILURES:
                out[base] = clean_cause(_COMPILE_FAILURES[base]) + " (cached graph)"
            else:
                out[base] = "graph failed to compile (cached)"
        return out


_INITIAL_DENIED: dict | None = None


def _values(args, kwargs):
    """The arguments as the fallback check sees them (Values for lazy tensors)."""
    from lazy_mlir.lazy.capture import value_of
    from lazy_mlir.lazy.tensor import LazyTensor
    out = []
    for a in flatten_out((args, kwargs)):
        out.append(value_of(a) if isinstance(a, LazyTensor) else a)
    return out


def error_cause(name: str, exc: BaseException) -> str:
    msg = str(exc)
    low = msg.lower()
    base = name.split(".")[0]
    if isinstance(exc, TimeoutError) or "timed out" in low:
        return "timeout"
    if "_local_scalar_dense" in msg and len(msg) < 60:
        return "data-dependent value (.item()) while decomposing"
    if "data-dependent" in low or "datadependent" in type(exc).__name__.lower() or \
            "data-independent" in low:
        return "data-dependent shape"
    if "meta" in low and ("no fake impl" in low or "'meta' backend" in low or "meta tensors" in low):
        return ("data-dependent shape (no meta kernel)" if base in DATA_DEPENDENT
                else "no meta kernel (shape inference)")
    if "expected all tensors to be on the same device" in low:
        return "CPU tensor argument (mixed devices)"
    if "would resize its out=" in low:
        return "out= would resize"
    if "iree" in low or "hal" in low.split():
        return "IREE runtime: " + _first_line(msg, 120)
    return f"{type(exc).__name__}: {_first_line(msg, 120)}"


def _where(tb) -> str:
    frames = traceback.extract_tb(tb)
    mine = [f for f in frames if "lazy_mlir" in f.filename]
    f = (mine or frames or [None])[-1]
    if f is None:
        return ""
    return f"{os.path.relpath(f.filename, os.path.dirname(os.path.dirname(HERE))) if 'lazy_mlir' in f.filename else os.path.basename(f.filename)}:{f.lineno} {f.name}"


# --------------------------------------------------------------- running
@contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _sync(lm):
    lm.mark_step()
    lm.wait_device_ops()


def _gen_samples(op, dtype, n, skip=()):
    torch.manual_seed(0)
    out = []
    it = op.sample_inputs("cpu", dtype, requires_grad=False)
    for i, s in enumerate(itertools.islice(it, n)):
        if i not in skip:
            out.append((i, s))
    return out


class _TorchLazyShim(types.SimpleNamespace):
    """``torch._lazy`` as op_db's ``wrapper_set_seed`` uses it (``mark_step``
    on a result on the ``lazy`` device): the lazy_mlir mark_step."""


@contextmanager
def _torch_lazy_shim():
    import lazy_mlir as lm
    had = "_lazy" in vars(torch)
    old = vars(torch).get("_lazy")
    torch._lazy = _TorchLazyShim(mark_step=lambda *a, **k: lm.mark_step())
    try:
        yield
    finally:
        if had:
            torch._lazy = old
        else:
            del torch._lazy


def _eager(fn, s):
    torch.manual_seed(1234)
    inp, args, kwargs = clone_tree(s.input), clone_tree(tuple(s.args)), clone_tree(dict(s.kwargs))
    return fn(inp, *args, **kwargs), inp


def run_op(name: str, dtype_name: str = "float32", samples: int = 3, variant: str = "op",
           batch: bool = True, skip_samples=(), progress=None) -> dict:
    """Classify one (op, dtype) in this process; see the module docstring."""
    import lazy_mlir as lm
    t0 = time.perf_counter()
    op = op_db()[name]
    dtype = DTYPES[dtype_name]
    res = {"op": name, "dtype": dtype_name, "variant": variant, "status": None,
           "samples": 0, "samples_eager_error": 0, "samples_skipped": sorted(skip_samples),
           "fallback_ops": {}, "errors": [], "mismatches": [], "notes": [], "syncs": {}}
    if name in SKIPS:
        res.update(status="skipped", cause=SKIPS[name])
        return res
    if dtype not in op.supported_dtypes("cpu"):
        res.update(status="unsupported_dtype")
        return res
    fn = variant_fn(op, variant)
    if fn is None:
        res.update(status="no_variant")
        return res
    try:
        with _quiet():
            _sync(lm)
    except Exception:  # noqa: BLE001  (an earlier op's failure)
        pass
    rtol, atol = tolerance(op, dtype)
    values = name not in METADATA_ONLY
    res["tolerance"] = {"rtol": rtol, "atol": atol}
    try:
        with _quiet():
            samples_ = _gen_samples(op, dtype, samples, set(skip_samples))
    except Exception as e:  # noqa: BLE001
        res.update(status="no_samples", cause=f"sample_inputs raised {type(e).__name__}: "
                                              f"{_first_line(str(e))}")
        return res
    if batch and len(samples_) > 1:
        first = _run_samples(lm, name, fn, samples_, rtol, atol, values, True, progress)
        if first["status"] == "compiled":
            first["batched"] = True
            res.update(first)
            res["seconds"] = round(time.perf_counter() - t0, 3)
            return res
        res["batched_status"] = first["status"]
    else:
        first = None
    second = _run_samples(lm, name, fn, samples_, rtol, atol, values, False, progress)
    if res.get("batched_status") == "mismatch" and second["status"] != "mismatch":
        # Still a wrong answer (uninitialized memory, or samples interfering).
        second["notes"].append("the mismatch shows only when all samples are in one graph "
                               f"(one graph per sample: {second['status']})")
        second["mismatches"] = [dict(m, batched=True) for m in first["mismatches"]]
        second["status"] = "mismatch"
        second.pop("cause", None)
    res.update(second)
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def _run_samples(lm, name, fn, samples_, rtol, atol, values, batch, progress) -> dict:
    out = {"samples": 0, "samples_eager_error": 0, "errors": [], "mismatches": [],
           "notes": [], "fallback_ops": {}, "syncs": {}}
    with _quiet(), Probe() as probe:
        pending = []  # (index, sample, description, lazy result, eager result, lazy input, eager input)
        for i, s in samples_:
            desc = describe_sample(s)
            if progress:
                progress(i, desc)
            try:
                expected, eager_inp = _eager(fn, s)
            except Exception:  # noqa: BLE001
                out["samples_eager_error"] += 1
                continue
            out["samples"] += 1
            try:
                inp, args, kwargs = lazy_args(name, s)
                torch.manual_seed(1234)
                with _torch_lazy_shim():
                    actual = fn(inp, *args, **kwargs)
                if not batch:
                    _check(lm, i, s, desc, actual, expected, inp, eager_inp, fn, rtol, atol, values, out, name)
                else:
                    pending.append((i, s, desc, actual, expected, inp, eager_inp))
            except Exception as e:  # noqa: BLE001
                _record_error(out, name, i, desc, e)
            finally:
                if not batch:
                    try:
                        _sync(lm)
                    except Exception as e:  # noqa: BLE001
                        _record_error(out, name, i, desc, e, stage="sync")
        if batch:
            if progress:
                progress("batch", "all samples in one graph")
            try:
                lm.mark_step()
            except Exception as e:  # noqa: BLE001
                _record_error(out, name, -1, "all samples (one graph)", e, stage="mark_step")
            for i, s, desc, actual, expected, inp, eager_inp in pending:
                try:
                    _check(lm, i, s, desc, actual, expected, inp, eager_inp, fn, rtol, atol, values, out, name)
                except Exception as e:  # noqa: BLE001
                    _record_error(out, name, i, desc, e)
            try:
                lm.wait_device_ops()
            except Exception as e:  # noqa: BLE001
                _record_error(out, name, -1, "all samples (one graph)", e, stage="sync")
            pending = None
    counters = probe.counters()
    out["fallback_ops"] = probe.fallback_causes()
    out["syncs"] = {k[len("sync::"):]: v for k, v in counters.items() if k.startswith("sync::")}
    out["compiles"] = counters.get("UncachedCompile", 0) + counters.get("PersistentCacheHit", 0)
    if probe.denied:
        out["denied"] = {k: _first_line(v, 400) for k, v in probe.denied.items()}
    if out["mismatches"]:
        out["status"] = "mismatch"
    elif out["errors"]:
        out["status"] = "error"
    elif not out["samples"]:
        out["status"] = "no_samples"
        out["cause"] = "eager CPU raised on every sample"
    elif out["fallback_ops"]:
        out["status"] = "fallback"
    else:
        out["status"] = "compiled"
    if out["status"] == "error":
        out["cause"] = out["errors"][0]["cause"]
    elif out["status"] == "fallback":
        out["cause"] = "; ".join(sorted(set(out["fallback_ops"].values())))
    gc.collect()
    return out


def _check(lm, i, s, desc, actual, expected, inp, eager_inp, fn, rtol, atol, values, out, name):
    why_random = METADATA_ONLY.get(name) if not values else random_sample(name, s)
    counted = why_random is None
    rescue = tie_rescue(name, s)
    notes = []
    try:
        notes += compare(actual, expected, rtol, atol, counted, rescue)
        if fn is not None and getattr(fn, "__name__", "").endswith("_") and \
                isinstance(eager_inp, torch.Tensor):
            notes += compare(inp, eager_inp, rtol, atol, counted, rescue)  # in-place: the input too
    except Mismatch as m:
        out["mismatches"].append({"sample": i, "desc": desc, **m.info})
        return
    if not counted:
        # Random or uninitialized values: only shape and dtype count; say
        # whether the values happened to match eager with the same seed.
        try:
            compare(actual, expected, rtol, atol, True)
            notes.append("values not counted (%s); they match eager" % why_random)
        except Mismatch:
            notes.append("values not counted (%s); they differ from eager" % why_random)
    for note in notes:
        if note not in out["notes"]:
            out["notes"].append(note)


def _record_error(out, name, i, desc, e, stage="call"):
    out["errors"].append({"sample": i, "desc": desc, "stage": stage, "type": type(e).__name__,
                          "message": _first_line(str(e), 300), "cause": error_cause(name, e),
                          "where": _where(e.__traceback__)})


# ------------------------------------------------------------ subprocess
def _prestart_runtime_thread() -> None:
    """Start lazy_mlir's runtime worker thread before the first graph.

    ``lazy_mlir/runtime/run_queue.py`` ``submit()`` holds its lock while it adds
    a done-callback that takes the same lock: when the job is already done
    (it ran while the submitting thread waited for the GIL), the process
    deadlocks. The first submit, which also starts the pool's thread, hit
    this in about a third of fresh processes here; starting the thread
    beforehand avoids that case (later hangs are retried by ``Worker``).
    Fixed in lazy_mlir by 18e4497 (the callback is added outside the lock);
    kept so that older checkouts can be swept.
    """
    try:
        import concurrent.futures

        from lazy_mlir.runtime import run_queue as rt
        with rt._lock:
            if rt._pool is None:
                rt._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lazy-mlir")
            pool = rt._pool
        pool.submit(lambda: None).result()
    except Exception:  # noqa: BLE001  (lazy_mlir changed: nothing to do)
        pass


def _worker_main(conn) -> None:
    """Loop of a worker process: ("run", kwargs) -> ("result", dict)."""
    os.setpgrp()  # its own process group: a kill takes its iree-compile children too
    logging.getLogger("lazy_mlir").propagate = False
    logging.getLogger("lazy_mlir").addHandler(logging.NullHandler())
    warnings.simplefilter("ignore")
    try:
        import lazy_mlir as lm
        op_db()
        conn.send(("loaded", lm.__file__))
        _prestart_runtime_thread()
        # Warm up; if it hangs, the parent restarts this process.
        (torch.ones(2).to("lazy") * 2).cpu()
        lm.mark_step()
        lm.wait_device_ops()
        lm.metrics.reset()
    except BaseException as e:  # noqa: BLE001
        conn.send(("fatal", f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", lm.__file__))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        kwargs = msg[1]
        try:
            res = run_op(progress=lambda i, desc: conn.send(("sample", i, desc)), **kwargs)
        except BaseException as e:  # noqa: BLE001
            res = {"op": kwargs.get("name"), "dtype": kwargs.get("dtype_name"), "status": "error",
                   "errors": [{"sample": -1, "desc": "", "stage": "harness",
                               "type": type(e).__name__, "message": _first_line(str(e)),
                               "cause": f"harness: {type(e).__name__}",
                               "where": _where(e.__traceback__)}],
                   "mismatches": [], "fallback_ops": {}, "notes": []}
        conn.send(("result", res))


def _exit_name(code) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        import signal
        try:
            return signal.Signals(-code).name
        except ValueError:
            pass
    return f"exit code {code}"


class Worker:
    """One worker subprocess that runs ``run_op`` with a per-sample timeout."""

    def __init__(self, timeout: float = SAMPLE_TIMEOUT, start_timeout: float = 150.0):
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.proc = None
        self.conn = None
        self.restarts = 0

    def _start(self, attempts: int = 3):
        for attempt in range(attempts):
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
            self.proc.start()
            child.close()
            self.conn = parent
            try:
                ok = parent.poll(self.start_timeout)  # imports
                msg = parent.recv() if ok else None
                if msg is not None and msg[0] == "loaded":
                    ok = parent.poll(self.timeout)  # the warm-up graph
                    msg = parent.recv() if ok else None
            except (EOFError, OSError):
                msg = None
            if msg is not None and msg[0] == "ready":
                self.lazy_mlir_file = msg[1]
                return
            self._kill()
            if msg is not None:
                raise RuntimeError(f"opinfo worker failed to start: {msg[1]}")
            self.restarts += 1
        raise RuntimeError(f"opinfo worker did not start ({attempts} attempts)")

    def _kill(self):
        if self.proc is not None:
            if self.proc.is_alive():
                try:  # the worker and the iree-compile it waits for (else orphaned, still compiling)
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
            self.proc.join(10)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def close(self):
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(("stop",))
                self.proc.join(10)
            except Exception:  # noqa: BLE001
                pass
        self._kill()

    def run(self, name: str, dtype_name: str = "float32", samples: int = 3,
            variant: str = "op", batch: bool = True) -> dict:
        """``run_op`` in the worker; a sample that hangs or kills the worker
        is recorded as an error and the op is run again without it."""
        skip: list[int] = []
        lost: list[dict] = []
        notes: list[str] = []
        hung: set = set()
        t0 = time.perf_counter()
        for _attempt in range(2 * samples + 4):
            if self.proc is None or not self.proc.is_alive():
                self._kill()
                self._start()
            kwargs = dict(name=name, dtype_name=dtype_name, samples=samples, variant=variant,
                          batch=batch, skip_samples=tuple(skip))
            self.conn.send(("run", kwargs))
            current, desc = -1, ""
            while True:
                try:
                    ready = self.conn.poll(self.timeout)
                    msg = self.conn.recv() if ready else None
                except (EOFError, OSError):
                    msg, ready = None, "died"
                if msg is None:
                    if ready != "died" or self.proc is None:
                        code = None
                    else:
                        self.proc.join(10)
                        code = self.proc.exitcode
                    kind = "hang" if ready is False else "crash"
                    self._kill()
                    self.restarts += 1
                    lost.append({"sample": current, "desc": desc, "stage": kind,
                                 "type": "Timeout" if kind == "hang" else "WorkerCrash",
                                 "message": (f"no progress for {self.timeout:.0f} s" if kind == "hang"
                                             else f"the worker process died ({_exit_name(code)})"),
                                 "cause": ("timeout" if kind == "hang"
                                           else f"process crash ({_exit_name(code)})"),
                                 "where": ""})
                    break
                if msg[0] == "sample":
                    current, desc = msg[1], msg[2]
                    continue
                res = msg[1]
                res["errors"] = lost + list(res.get("errors") or [])
                res["notes"] = notes + list(res.get("notes") or [])
                if lost and res.get("status") in ("compiled", "fallback", "no_samples", None):
                    res["status"] = "error"
                    res["cause"] = lost[0]["cause"]
                res["seconds"] = round(time.perf_counter() - t0, 3)
                return res
            last = lost[-1]
            if last["stage"] == "hang" and current not in hung:
                # lazy_mlir's runtime worker can deadlock at random (a race in
                # runtime/run_queue.py submit()): a hang is retried once before
                # it counts, and the retry is noted.
                hung.add(current)
                lost.pop()
                notes.append(f"sample {current} hung once ({last['message']}); retried")
                continue
            if current == "batch" and batch:
                batch = False  # the one-graph run died: run one graph per sample
                notes.append(f"the one-graph run of all samples: {lost.pop()['message']}")
                continue
            if not isinstance(current, int) or current < 0 or current in skip:
                break  # not inside a sample: give up on the op
            skip.append(current)
        return {"op": name, "dtype": dtype_name, "variant": variant, "status": "error",
                "cause": lost[-1]["cause"] if lost else "harness", "errors": lost,
                "mismatches": [], "fallback_ops": {}, "notes": notes, "samples_skipped": skip,
                "seconds": round(time.perf_counter() - t0, 3)}
