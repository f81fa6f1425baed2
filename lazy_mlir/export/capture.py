"""Capture for export: a module or function as ``main(args...) -> outputs``.

An nn.Module is captured as a function of (its parameters and buffers...,
its inputs...) through ``torch.func.functional_call``, so that the weights are
arguments of the lowered function that the writer binds to IREE parameters
rather than constants folded into the code. Two routes give the same
``Captured`` record:

- ``capture_lazy`` (static shapes): ``lm.jit`` on the lazy device, the same
  capture, graph and stages as training. Tensors made inside the function
  (lifted scalars, constants) are further arguments after the inputs; they
  are stored like parameters, as ``const.<i>``.
- ``capture_exported`` (sizes chosen at run time): ``torch.export`` with
  symbolic dimensions, imported by torch-mlir's front end
  (``dialects.export_import``), then the same pass pipelines as the lazy route.

Guarantees: capture never changes the module or its weights; a function that
reads a tensor's value on the host while being captured (``if x.sum() > 0``,
``.item()``) or runs an op eagerly is refused with ``ExportError``, since the
artifact would silently keep the value seen at export time.
"""
from __future__ import annotations

import hashlib
import inspect
import re
import time
import warnings
from dataclasses import dataclass, field

import torch

from .. import metrics

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ExportError(ValueError):
    """Something that cannot be exported; the message says what and why."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: torch.dtype
    shape: tuple  # ints, or symbol names (str) for sizes chosen at run time

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": dtype_name(self.dtype), "shape": list(self.shape)}


@dataclass
class Captured:
    """``linalg``: one ``func.func @main`` whose arguments are, in order,
    described by ``args``: a runtime input (``TensorInfo``, named) or a stored
    tensor (``(key, host tensor)``)."""

    linalg: str
    args: list                     # TensorInfo (an input) | (key, torch.Tensor) (stored)
    outputs: list[TensorInfo]
    output_structure: str          # "single" | "tuple" | "dict"
    graph_key: str
    route: str
    seconds: dict = field(default_factory=dict)
    dims: dict = field(default_factory=dict)  # symbol -> {"min": m, "max": M or None}

    @property
    def inputs(self) -> list[TensorInfo]:
        return [a for a in self.args if isinstance(a, TensorInfo)]

    @property
    def stored(self) -> list[tuple[str, torch.Tensor]]:
        return [a for a in self.args if not isinstance(a, TensorInfo)]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``float32`` (numpy's names, plus ``bfloat16``)."""
    return str(dtype).removeprefix("torch.")


# -- what to capture ----------------------------------------------------------

def module_state(module: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Parameters then buffers, by their state_dict names (a tensor shared by
    two names appears once), as detached host tensors."""
    out, seen = [], set()
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        out.append((name, t.detach().cpu()))
    return out


def input_names(fn, n: int, given=None) -> list[str]:
    """Names of ``fn``'s first ``n`` positional parameters (``input<i>`` for
    ``*args``), or ``given``."""
    if given is not None:
        names = list(given)
        if len(names) != n:
            raise ExportError(f"lazy-mlir: {n} example inputs but {len(names)} input names")
        return names
    names = []
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            break
    names = names[:n]
    names += [f"input{i}" for i in range(len(names), n)]
    if len(set(names)) != n:
        names = [f"input{i}" for i in range(n)]
    return names


def _as_function(module_or_fn, state):
    """(callable of (*state, *inputs), the callable whose signature names the inputs)."""
    if isinstance(module_or_fn, torch.nn.Module):
        module = module_or_fn
        keys = [k for k, _ in state]

        def flat(*args):
            return torch.func.functional_call(module, dict(zip(keys, args[:len(keys)])),
                                              tuple(args[len(keys):]))
        return flat, module.forward
    if not callable(module_or_fn):
        raise ExportError("lazy-mlir: export takes an nn.Module or a function of tensors, "
                          f"not {type(module_or_fn).__name__}")
    return module_or_fn, module_or_fn


def _structure(tree) -> tuple[str, list[str]]:
    """How outputs are returned, and their names, from a pytree spec."""
    if tree.is_leaf():
        return "single", ["output"]
    children = tree.children() if hasattr(tree, "children") else tree.children_specs
    if tree.type is dict and all(c.is_leaf() for c in children):
        return "dict", [str(k) for k in tree.context]
    return "tuple", [f"output{i}" for i in range(tree.num_leaves)]


def refuse_host_reads(before: dict, what: str) -> None:
    """``ExportError`` if ops read values on the host or ran eagerly since ``before``."""
    changed = metrics.changed_since(before)
    if changed:
        syncs = [n[6:] for n in changed if n.startswith("sync::")]
        eager = [n[6:] for n in changed if n.startswith("aten::")]
        why = []
        if syncs:
            why.append(f"reads tensor values on the host ({', '.join(syncs)}), e.g. "
                       "`.item()` or `if tensor:`")
        if eager:
            why.append(f"runs ops the compiler does not take eagerly ({', '.join(eager)})")
        raise ExportError(f"lazy-mlir: {what} {' and '.join(why)} while being captured; "
                          "the artifact would keep the values seen at export time. Make "
                          "the computation tensor-only (torch.where instead of if, no .item())")


# -- the lazy route -------------------------------------------------------------

def capture_lazy(module_or_fn, example_args: tuple, config, names=None,
                 target=None) -> Captured:
    """Capture with ``lm.jit`` on the lazy device (static shapes), lowered
    for ``target`` (a ``Target``; default the current one) as mark_step
    lowers for it."""
    from ..lazy.sync import host_of
    from ..frontends.jit import jit
    state = module_state(module_or_fn) if isinstance(module_or_fn, torch.nn.Module) else []
    flat, named = _as_function(module_or_fn, state)
    names = input_names(named, len(example_args), names)
    t0 = time.perf_counter()
    before = metrics.host_reads()
    lowered = jit(flat).lower(*[t for _, t in state], *example_args, target=target,
                              config=config)
    refuse_host_reads(before, "the function")
    graph = lowered.graph
    args: list = list(state)
    args += [TensorInfo(n, a.dtype, tuple(a.shape)) for n, a in zip(names, example_args)]
    for i, d in enumerate(graph.inputs[lowered.n_args:]):
        args.append((f"const.{i}", host_of(d).detach().clone()))
    kind, out_names = _structure(lowered.out_tree)
    outputs = [TensorInfo(n, v.spec.dtype, v.spec.shape)
               for n, v in zip(out_names, graph.outputs)]
    text = lowered.as_text("linalg")
    return Captured(text, args, outputs, kind, graph.key, "lazy",
                    {"capture+lower": time.perf_counter() - t0})


# -- the torch.export route -------------------------------------------------------

class _Flat(torch.nn.Module):
    """A module whose forward is ``fn(*args)``; ``fn`` is not registered as a
    submodule, so torch.export lifts no weights of its own."""

    def __init__(self, fn):
        super().__init__()
        self.__dict__["fn"] = fn

    def forward(self, *args):
        return self.fn(*args)


def check_dynamic_dims(dynamic_dims: dict, names: list[str], examples: tuple):
    """``{input name: {axis: symbol}}`` validated against the inputs, where a
    symbol is a name or (name, min[, max]); returns ({input: {axis: name}},
    {name: (min, max or None)}). A name used twice is one size."""
    if not isinstance(dynamic_dims, dict):
        raise ExportError("lazy-mlir: dynamic_dims must be {input name: {axis: symbol}}, "
                          'e.g. {"x": {0: "batch"}}')
    out, ranges = {}, {}
    for name, axes in dynamic_dims.items():
        if name not in names:
            raise ExportError(f"lazy-mlir: dynamic_dims names {name!r}, which is not an "
                              f"input; inputs: {', '.join(names)}")
        t = examples[names.index(name)]
        if not isinstance(axes, dict):
            raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}] must be {{axis: symbol}}")
        for axis, spec in axes.items():
            if not isinstance(axis, int) or not -t.dim() <= axis < t.dim():
                raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}]: axis {axis!r} is out "
                                  f"of range for a {t.dim()}-d input")
            sym, lo, hi = (spec, 1, None) if isinstance(spec, str) else \
                (tuple(spec) + (1, None))[:3] if isinstance(spec, (tuple, list)) and \
                len(spec) in (2, 3) else (None, 1, None)
            if not isinstance(sym, str) or not _SYMBOL.fullmatch(sym) or \
                    not isinstance(lo, int) or lo < 1 or \
                    (hi is not None and (not isinstance(hi, int) or hi < lo)):
                raise ExportError(f"lazy-mlir: dynamic_dims[{name!r}][{axis}]: {spec!r} must "
                                  "be a name such as 'batch', or (name, min) / (name, min, "
                                  "max) with 1 <= min <= max")
            if ranges.setdefault(sym, (lo, hi)) != (lo, hi):
                raise ExportError(f"lazy-mlir: dynamic_dims gives {sym!r} two ranges")
            out.setdefault(name, {})[axis % t.dim()] = sym
    return out, ranges


def capture_exported(module_or_fn, example_args: tuple, dynamic_dims: dict, config,
                     names=None) -> Captured:
    """Capture with ``torch.export`` and symbolic sizes for ``dynamic_dims``."""
    from torch.export import Dim

    from ..dialects.export_import import import_exported_program
    from ..ops.support import decomposition_table
    from ..pipeline.stages import Provenance, Stage, lower_torch
    if config.mixed_precision != "none":
        raise ExportError("lazy-mlir: mixed_precision is not applied on the torch.export "
                          "route (dynamic_dims); export with static shapes instead")
    state = module_state(module_or_fn) if isinstance(module_or_fn, torch.nn.Module) else []
    flat, named = _as_function(module_or_fn, state)
    names = input_names(named, len(example_args), names)
    dyn, ranges = check_dynamic_dims(dynamic_dims, names, example_args)
    t0 = time.perf_counter()
    examples, specs, dims = [], [], {}
    for name, t in zip(names, example_args):
        axes = dyn.get(name, {})
        for axis, sym in axes.items():
            if t.shape[axis] == 0:
                raise ExportError(f"lazy-mlir: input {name!r} has size 0 on dynamic "
                                  f"axis {axis}; give an example of size >= 1")
            if t.shape[axis] == 1 and (ranges[sym][1] or 2) >= 2:
                # torch.export specializes sizes 0 and 1; trace with 2 (values do
                # not matter for the graph, only shapes).
                t = torch.cat([t] * 2, dim=axis)
        examples.append(t)
        spec = {}
        for axis, sym in axes.items():
            lo, hi = ranges[sym]
            spec[axis] = dims.setdefault(sym, Dim(sym, min=lo, max=hi) if hi else
                                         Dim(sym, min=lo))
        specs.append(spec or None)
    all_args = tuple(t for _, t in state) + tuple(examples)
    all_specs = tuple([None] * len(state) + specs)
    try:
        with warnings.catch_warnings():
            # torch.export deep-copies pytree specs through a deprecated path.
            warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
            program = torch.export.export(_Flat(flat), all_args,
                                          dynamic_shapes=(all_specs,), strict=False)
    except Exception as e:
        raise ExportError(f"lazy-mlir: torch.export failed with dynamic_dims {dyn}: "
                          f"{_export_failure(e)}") from None
    table = decomposition_table() if config.decompositions else {}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        torch_text = import_exported_program(program, table)
    # The lowering after import that the lazy route runs, without a target's
    # rewrites: those are only tested on static shapes.
    text = lower_torch(Stage("torch", torch_text, Provenance("torch.export", 0.0)),
                       config)[-1].text

    # Symbols of the program (s0, s37, ...) -> the names the user gave.
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    user = placeholders[len(placeholders) - len(all_args):]
    symbols: dict[str, str] = {}
    args: list = list(state)
    for name, node, t in zip(names, user[len(state):], example_args):
        shape = list(t.shape)
        for axis, sym in dyn.get(name, {}).items():
            symbols[str(node.meta["val"].shape[axis])] = sym
            shape[axis] = sym
        args.append(TensorInfo(name, t.dtype, tuple(shape)))
    out_node = next(n for n in program.graph.nodes if n.op == "output")
    kind, out_names = _structure(program.call_spec.out_spec)
    outputs = []
    for n, v in zip(out_names, out_node.args[0]):
        val = v.meta["val"]
        shape = tuple(d if isinstance(d, int) else _rename(str(d), symbols)
                      for d in val.shape)
        outputs.append(TensorInfo(n, val.dtype, shape))
    key = hashlib.sha256(torch_text.encode()).hexdigest()
    return Captured(text, args, outputs, kind, key, "torch.export",
                    {"export+lower": time.perf_counter() - t0},
                    {sym: {"min": lo, "max": hi} for sym, (lo, hi) in ranges.items()})


def _export_failure(e: Exception) -> str:
    """torch.export's error in short: its first line, the violated guards and
    the fix it suggests (e.g. ``h = Dim('h', min=3)``)."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    keep = [lines[0]] + [ln.lstrip("- ") for ln in lines[1:]
                         if ln.startswith("- Not all values") or "= Dim(" in ln]
    return " ".join(keep)


def _rename(expr: str, symbols: dict[str, str]) -> str | int:
    out = _SYMBOL.sub(lambda m: symbols.get(m.group(0), m.group(0)), expr)
    return int(out) if out.isdigit() else out
