"""``lm.export(..., dynamic_dims=...)`` through the lazy device: sizes chosen
at run time, with the index clamps and checks of the training path.

The function is captured three times on the lazy device, at three sizes of
every symbol (two make the plan, as the size families see a graph at two
sizes, ``pipeline/size_family.py``; the third confirms its integer
expressions), each time with its indices clamped into range and checked by
in-graph flags (``lazy/bounds.py`` in ``in_graph`` mode: an input index is
data the artifact receives later, never checked at capture), and
deterministic host factories recorded as ops (``arange(t)`` follows the
size: ``lazy/device.factories_in_graph``). The graphs must be one family;
``derive_plan`` then gives the dynamic dimensions (exactly those
``dynamic_dims`` names, one class per symbol) and the integers that follow
them (``view`` to ``[b * t, d]``); the fx module is traced again with one
symbol per name, ranged as the user said, lowered by the mark_step pipeline
to torch-backend and compiled by IREE's torch input, as the size families'
modules are (the weights become IREE parameters:
``dialects.export_import.bind_parameters``).

Guarantees: the artifact computes what the function computes at every size
in range; an index out of range raises (the module's last result holds one
flag per check; ``artifact.ExportedFunction`` raises the op's
``IndexError``/``RuntimeError``) and the kernel reads inside the tensor
(clamped); an input of another rank, dtype or static size, or a size out
of range, raises ``SignatureError`` before anything runs. Refused with
``ExportError``: a function whose graph is another at the other sizes, one
whose trace assumes something of a size (``n != 1``; give a range), and a
constant made on the host whose shape follows a size.
"""
from __future__ import annotations

import re
import time
from dataclasses import replace

import torch
from torch.utils._pytree import tree_flatten

from .. import metrics
from ..pipeline.size_family import SizeSpecialized, derive_plan, explain, family_of, \
    symbolic_module
from .capture import (Captured, ExportError, TensorInfo, _as_function, _structure,
                      check_dynamic_dims, input_names, module_state, refuse_host_reads)


def capture_dynamic(module_or_fn, example_args: tuple, dynamic_dims: dict, config,
                    names) -> Captured:
    """Capture with the sizes ``dynamic_dims`` names free."""
    from ..pipeline.fx_graph import to_fx
    state = module_state(module_or_fn) if isinstance(module_or_fn, torch.nn.Module) else []
    flat, named = _as_function(module_or_fn, state)
    names = input_names(named, len(example_args), names)
    dyn, ranges = check_dynamic_dims(dynamic_dims, names, example_args)
    symbols = list(ranges)
    t0 = time.perf_counter()
    sizes = _trace_sizes(example_args, names, dyn, ranges)
    traces = [_trace(flat, state, _resized(example_args, names, dyn, s)) for s in sizes]
    (g1, checks1, _), (g2, checks2, tree), (g3, checks3, _) = traces
    if not [m for _, m in checks1] == [m for _, m in checks2] == [m for _, m in checks3]:
        raise ExportError("lazy-mlir: the function checks other indices at another size of "
                          f"{', '.join(symbols)}; export it with static shapes")
    gm = to_fx(g2)
    plan, classes = _plan(family_of(to_fx(g1)), family_of(gm), len(state), names, dyn, symbols)
    third = family_of(to_fx(g3))
    if third[0] != family_of(gm)[0] or not plan.admits(third[1]):
        raise ExportError("lazy-mlir: the function builds another graph (or integers that no "
                          f"size explains) at a third size of {', '.join(symbols)}; export "
                          "it with static shapes")
    _same_constants(g1.inputs[len(state) + len(example_args):],
                    g3.inputs[len(state) + len(example_args):])
    plan = replace(plan, ranges=tuple(ranges[s] for s in classes))
    try:
        traced = symbolic_module(gm, plan)
    except SizeSpecialized as e:
        raise ExportError(f"lazy-mlir: the function fixes a dynamic size ({e}); export "
                          "with static shapes") from None
    if traced.meta["size_guards"]:
        raise ExportError("lazy-mlir: the function holds only where "
                          f"{_named(' and '.join(traced.meta['size_guards']), classes)}; "
                          "give dynamic_dims a range in which it holds: (name, min, max)")
    gm.meta["size_plan"] = plan
    text = _lowered(gm, config)
    args: list = list(state)
    for name, t in zip(names, example_args):
        shape = list(t.shape)
        for axis, sym in dyn.get(name, {}).items():
            shape[axis] = sym
        args.append(TensorInfo(name, t.dtype, tuple(shape)))
    n_lead = len(state) + len(example_args)
    _same_constants(g1.inputs[n_lead:], g2.inputs[n_lead:])
    for i, d in enumerate(g2.inputs[n_lead:]):
        args.append((f"const.{i}", d.host.detach().clone()))
    kind, out_names = _structure(tree)
    n_out = len(g2.outputs) - (1 if checks2 else 0)
    pairs = [(sizes[0][s], sizes[1][s]) for s in classes]
    outputs = [TensorInfo(n, b.spec.dtype, _out_shape(a.spec.shape, b.spec.shape, pairs,
                                                      classes))
               for n, a, b in zip(out_names, g1.outputs[:n_out], g2.outputs[:n_out])]
    _keeps_sizes_free(text, [a.shape if isinstance(a, TensorInfo) else tuple(a[1].shape)
                             for a in args], [o.shape for o in outputs])
    return Captured(text, args, outputs, kind, g2.key, "lazy (dynamic dimensions)",
                    {"capture+lower": time.perf_counter() - t0},
                    {s: {"min": lo, "max": hi} for s, (lo, hi) in ranges.items()},
                    [(exc.__name__, message) for exc, message in checks2], "torch-backend")


_STEPS = (3, 7, 11, 13, 17, 19, 23, 29)  # (distinct primes: no product of two sizes
# changes by a multiple of one size's change, so ``explain`` finds the product)


def _trace_sizes(examples, names, dyn, ranges) -> list[dict[str, int]]:
    """Three sizes per symbol, all at least 2 (a size of 1 broadcasts and
    stays static in a plan), in range: the plan comes from the first two,
    the third confirms its expressions."""
    first: dict[str, int] = {}
    for name, t in zip(names, examples):
        for axis, sym in dyn.get(name, {}).items():
            first.setdefault(sym, t.shape[axis])
    out: list[dict[str, int]] = [{}, {}, {}]
    for j, (sym, size) in enumerate(first.items()):
        lo, hi = ranges[sym]
        a = max(size, lo, 2)
        for d in (_STEPS[j % len(_STEPS)], 1):
            if hi is not None and a + 2 * d > hi:
                a = max(lo, 2, hi - 2 * d)
            if hi is None or a + 2 * d <= hi:
                break
        else:
            raise ExportError(f"lazy-mlir: dynamic_dims: {sym!r} ranges over too few sizes "
                              "to be dynamic; export it with a static size")
        for k in range(3):
            out[k][sym] = a + k * d
    return out


def _resized(examples, names, dyn, sizes) -> list[torch.Tensor]:
    """The examples with each dynamic axis at ``sizes`` (repeated, then cut:
    index values stay those of the example)."""
    out = []
    for name, t in zip(names, examples):
        for axis, sym in dyn.get(name, {}).items():
            n = sizes[sym]
            reps = -(-n // max(t.shape[axis], 1))
            t = torch.cat([t] * reps, dim=axis).narrow(axis, 0, n)
        out.append(t.contiguous())
    return out


def _trace(flat, state, args):
    """(graph, its index checks, the output tree) of ``flat`` on lazy copies
    of the state and ``args``: their data lead the graph's inputs; the
    checks' flags are its last output."""
    from ..graph.program import Graph
    from ..lazy import bounds, early_outputs, offsets
    from ..lazy.capture import data_value, emit, value_of
    from ..lazy.device import factories_in_graph
    from ..lazy.tensor import LazyTensor, wrap_value
    lazy = [wrap_value(data_value(t.detach().clone())) for t in [t for _, t in state] + args]
    leading = [value_of(t).data for t in lazy]
    before = metrics.host_reads()
    with bounds.in_graph(), early_outputs.one_graph(), offsets.constant_offsets(), \
            factories_in_graph():
        out = flat(*lazy)
    refuse_host_reads(before, "the function")
    leaves, tree = tree_flatten(out)
    if not leaves or not all(isinstance(t, LazyTensor) for t in leaves):
        raise ExportError("lazy-mlir: the function must return tensors computed from its "
                          "arguments")
    roots = []
    for t in leaves:
        v = value_of(t)
        roots.append(v if v.pending else emit(torch.ops.aten.clone.default, (v,), {})[0])
    checks: list = []

    def flags(order):
        flag, taken = bounds.take_flag(order, True, emit)
        checks.extend(taken)
        return [flag]
    return Graph.build(roots, leading, extra=flags), checks, tree


def _plan(first, second, n_state: int, names, dyn, symbols):
    """The size plan of the two traces, and the symbol of each of its
    classes; ``ExportError`` where the dynamic dimensions are not exactly
    those of ``dyn`` (one class per symbol)."""
    (k1, s1), (k2, s2) = first, second
    plan = derive_plan(s1, s2) if k1 is not None and k1 == k2 else None
    if plan is None:
        raise ExportError("lazy-mlir: the function builds another graph (or integers that "
                          "no size explains) at another size of "
                          f"{', '.join(symbols)}; export it with static shapes")
    classes: dict[int, str] = {}
    for i, cls in enumerate(plan.dims):
        is_input = n_state <= i < n_state + len(names)
        axes = dyn.get(names[i - n_state], {}) if is_input else {}
        for axis, c in enumerate(cls):
            sym = axes.get(axis)
            if c is None and sym is None:
                continue
            if c is None or sym is None or classes.setdefault(c, sym) != sym:
                where = (f"input {names[i - n_state]!r} axis {axis}" if is_input
                         else "a weight or a constant made on the host")
                raise ExportError(f"lazy-mlir: dynamic_dims: {where} does not vary as "
                                  "dynamic_dims says at other sizes (each name one size, "
                                  "each named axis free); export with static shapes")
    return plan, [classes[c] for c in range(len(plan.hints))]


def _same_constants(a, b) -> None:
    for x, y in zip(a, b):
        if x.spec != y.spec or not torch.equal(x.host, y.host):
            raise ExportError("lazy-mlir: a constant the function makes on the host depends "
                              "on a dynamic size; export with static shapes")


def _out_shape(a, b, pairs, classes) -> tuple:
    """An output's shape: its sizes, or the expression of the symbols a
    size follows (``n``, ``2*n+1``)."""
    out = []
    for x, y in zip(a, b):
        if x == y:
            out.append(x)
            continue
        e = explain(x, y, pairs)
        if e is None:
            raise ExportError("lazy-mlir: an output's size is no expression of the dynamic "
                              "sizes; export with static shapes")
        text = "*".join(([str(e.k)] if e.k != 1 else []) + [classes[c] for c in e.classes])
        out.append(text + (f"{e.add:+d}" if e.add else ""))
    return tuple(out)


def _keeps_sizes_free(text: str, ins: list[tuple], outs: list[tuple]) -> None:
    """``ExportError`` unless ``@main``'s signature leaves free
    (``?``) every size ``ins`` and ``outs`` name by a symbol, as a module
    whose lowering fixed one would compute at that size only."""
    line = next((ln for ln in text.splitlines() if "func.func @main(" in ln), "")
    types = re.findall(r"!torch\.vtensor<\[([^\]]*)\]", line)
    want = list(ins) + list(outs)
    if len(types) < len(want):
        return  # (results of no tensor type: nothing to compare)
    for shape, ty in zip(want, types):
        dims = [d for d in ty.split(",") if d]
        if len(dims) != len(shape) or any((d == "?") != isinstance(s, str)
                                          for d, s in zip(dims, shape)):
            raise ExportError(f"lazy-mlir: the lowering fixed a dynamic size ([{ty}] for "
                              f"{list(shape)}); export with static shapes")


def _named(text: str, classes: list[str]) -> str:
    for c, sym in enumerate(classes):
        text = text.replace(f"d{c}", sym)
    return text


def _lowered(gm, config) -> str:
    """``gm`` (with its size plan) lowered as mark_step lowers a module with
    dynamic dimensions, to torch-backend for IREE's torch input (torch-mlir's
    own linalg collapses a view of two dynamic dimensions wrongly); without a
    target's rewrites (the cpu target's convolutions as matmuls fix the batch
    size of a symbolic trace)."""
    from ..pipeline.stages import lower
    return lower(gm, config, None)[-1].text
