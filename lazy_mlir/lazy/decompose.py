"""Capture-time decomposition: an op the compiler cannot take, written by a
decomposition (PyTorch's ``torch._decomp``/``torch._refs`` table, or ours in
those registered with scope ``CAPTURE`` in ``ops/``) in ops it can take, is recorded as
those ops instead of falling back to eager.

The decision is made once per (op, argument specs, constant arguments): the
decomposition is traced on fake tensors (``make_fx``, unsupported ops it
produces decomposed in turn) and used only when every op of the trace can be
captured: supported by the dialect, not random (a decomposition would change
the random stream eager draws), not a read of a tensor's value (``.item()``,
a sync in the middle of capture) and no complex dtype. The trace is then
replayed op by op on the lazy tensors. Each use counts ``decomposed::<op>``
in ``lm.metrics``; an op that cannot be decomposed falls back as before.
"""
from __future__ import annotations

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map

from ..graph import argtree
from .. import metrics
from ..graph.ir import Value
from ..ops import support as _support  # by attribute: tests replace its tables
from .capture import data_value
from .kinds import RANDOM as _RANDOM, functional_of as _functional_of, kind as _kind
from .shapes import const_key
from .state import decompose_plans as _plans, decompose_table as _table_cache
from .state import import_checks as _import_checks
from .supported import UNSUPPORTED_DTYPES
from .tensor import LazyTensor, wrap_value

# In state.py: ``_plans``, (op, argument tree, specs and constants) -> traced
# GraphModule, or the reason the op is not decomposed (a str); ``_import_checks``
# the same for ``import_decomposition_reads_values``; ``_table_cache``,
# [DENIED snapshot, table].


def capture_table() -> dict:
    """Decompositions of the functional ops the compiler cannot take (ops
    denied at run time included): ours first, then PyTorch's. Views,
    in-place ops and random fills are capture's own business (an in-place op
    is recorded as its functional form, which may then be decomposed)."""
    denied = frozenset(_support.DENIED)
    if _table_cache[0] != denied:
        _table_cache[1] = {op: fn for op, fn in _support.capture_decompositions().items()
                           if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"
                           and not _support.op_is_supported(op) and _kind(op) == "functional"}
        _table_cache[0] = denied
    return _table_cache[1]


def _key(func, vals, tree):
    return (func, tree, tuple(v.spec if type(v) is Value else const_key(v) for v in vals))


def plan(func, vals: list, tree):
    """The traced decomposition of ``func`` on these arguments (``vals`` as
    ``record`` sees them: Values for tensors), or why there is none (a str)."""
    return _memo(_plans, func, vals, tree, lambda: _plan(func, vals, tree))


def _plan(func, vals, tree):
    table = capture_table()
    if func not in table:
        return "no decomposition"
    from ..ops.random_fills import SAME_RANDOM_STREAM
    random_ok = func in SAME_RANDOM_STREAM
    if torch.Tag.nondeterministic_seeded in func.tags and not random_ok:
        return "random op"
    gm = _trace(func, vals, tree, table)
    if isinstance(gm, str):
        return gm
    return _uncapturable(gm, random_ok) or gm


def import_decomposition_reads_values(func, vals: list, tree) -> bool:
    """True when the decomposition applied before import (``support.
    decomposition_table``) of an op the dialect lacks reads a tensor's value
    on these arguments (``take`` of a 0-dim index): it could not be compiled."""
    return _memo(_import_checks, func, vals, tree, lambda: _trace(
        func, vals, tree, _support.decomposition_table()) == _READS_VALUES)


_READS_VALUES = "reads tensor values"


def reads_values_when_imported(gm: fx.GraphModule) -> bool:
    """``import_decomposition_reads_values`` of every op of ``gm`` (an aten
    graph on the CPU whose placeholders hold fake tensors, of symbolic sizes
    too), traced once for the whole graph at its sizes' hints, and only
    where an op of it is decomposed before import."""
    if not any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
               and _support.decomposed_before_import(n.target) for n in gm.graph.nodes):
        return False
    mode = FakeTensorMode(allow_non_fake_inputs=True)  # (no ShapeEnv: a read raises)
    with mode:
        fakes = [torch.empty_strided(_hints(v.shape), _hints(v.stride()), dtype=v.dtype)
                 for v in (n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")]
    return _traced(gm, fakes, mode, _support.decomposition_table()) == _READS_VALUES


def _hints(sizes) -> list[int]:
    return [s.node.hint if isinstance(s, torch.SymInt) else s for s in sizes]


def _memo(memo, func, vals, tree, compute):
    try:
        key = _key(func, vals, tree)
        hit = memo.get(key)
    except TypeError:  # an unhashable constant
        key, hit = None, None
    if hit is None:
        hit = compute()
        if key is not None:
            memo[key] = hit
    return hit


def _trace(func, vals, tree, table):
    """``func`` on fake tensors of these specs through ``table``, or why not."""
    where = [i for i, v in enumerate(vals) if type(v) is Value]

    def f(*tensors):
        full = list(vals)
        for i, t in zip(where, tensors):
            full[i] = t
        args, kwargs = argtree.unflatten(full, tree)
        return func(*args, **kwargs)

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [torch.empty_strided(vals[i].spec.shape, vals[i].spec.stride,
                                     dtype=vals[i].spec.dtype) for i in where]
    return _traced(f, fakes, mode, table)


def _traced(f, fakes: list, mode, table):
    """``make_fx`` of ``f`` on ``fakes`` (of ``mode``) through ``table``, or why not."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, \
        DynamicOutputShapeException
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        with mode:
            gm = make_fx(f, decomposition_table=table)(*fakes)
    except (DataDependentOutputException, DynamicOutputShapeException):
        return _READS_VALUES
    except RecursionError:
        return "recursive decomposition"
    except Exception as e:  # noqa: BLE001 - a decomposition that does not apply here
        return f"decomposition failed ({type(e).__name__})"
    return gm


def _uncapturable(gm: fx.GraphModule, random_ok: bool = False) -> str | None:
    """Why some op of the trace cannot be captured, or None. With
    ``random_ok``, the random fills capture draws on the host as eager does
    are allowed."""
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        if any(isinstance(v, torch.Tensor) and v.dtype in UNSUPPORTED_DTYPES for v in vals):
            return "unsupported dtype"
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        op = node.target
        if op.namespace != "aten":  # prims (torch._refs), ...: not what the table names
            return f"produces {op}"
        if torch.Tag.nondeterministic_seeded in op.tags and not (random_ok and op in _RANDOM):
            return f"random op {op}"
        kind = _kind(op)
        if kind == "sync":
            return f"reads tensor values ({op})"
        if kind == "mutating":
            op = _functional_of(op)
            if op is None:
                return f"mutating op {node.target}"
        if kind in ("functional", "mutating") and not _support.op_is_supported(op):
            return f"produces {op}"
    return None


def run(func, gm: fx.GraphModule, args, kwargs, dispatch):
    """Replay the traced decomposition ``gm`` of ``func`` on lazy tensors,
    each op through ``dispatch`` (the router's, which calls this)."""
    flat, _ = argtree.flatten(args, kwargs)
    inputs = iter(a for a in flat if isinstance(a, torch.Tensor))
    env: dict = {}
    lazy = torch.device("lazy")

    def plain(a):  # fx's immutable lists -> lists, the trace's device -> lazy
        if isinstance(a, (list, tuple)):
            return type(a)(plain(x) for x in a) if type(a) is tuple else [plain(x) for x in a]
        if isinstance(a, dict):
            return {k: plain(v) for k, v in a.items()}
        return lazy if isinstance(a, torch.device) else a

    out = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node] = next(inputs)
        elif node.op == "get_attr":  # a constant tensor the decomposition made
            env[node] = wrap_value(data_value(getattr(gm, node.target).clone()))
        elif node.op == "call_function":
            a, k = plain(fx.node.map_arg((node.args, node.kwargs), lambda n: env[n]))
            if isinstance(node.target, torch._ops.OpOverload):
                env[node] = dispatch(node.target, a, k)
            else:  # operator.getitem on a multi-output op
                env[node] = node.target(*a, **k)
        elif node.op == "output":
            out = fx.node.map_arg(node.args[0], lambda n: env[n])
    metrics.counter_inc("decomposed::" + func.__name__.split(".")[0])
    # A functional op returns new tensors: never an input or a view of one.
    storages = {id(a._storage) for a in flat if isinstance(a, LazyTensor)}

    def fresh(t):
        if isinstance(t, LazyTensor) and id(t._storage) in storages:
            return dispatch(torch.ops.aten.clone.default, (t,), {})
        return t
    out = tree_map(fresh, out)
    return tuple(out) if isinstance(out, list) and len(func._schema.returns) > 1 else out
