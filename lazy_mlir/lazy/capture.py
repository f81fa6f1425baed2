"""Capture: every aten op on lazy tensors becomes a graph node.

``dispatch`` is the ``__torch_dispatch__`` of ``LazyTensor``. It sorts each op
into one of: a sync (the op returns a Python value), a view, an in-place or
``out=`` op (recorded in its functional form, then written back through
views), an op that falls back to eager CPU, or a plain op that is recorded.
"""
from __future__ import annotations

import functools
import numbers
import time

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from ..graph import argtree
from . import bounds, empty_inputs, shapes
from ..graph import debug
from .. import metrics
from . import foreach as _foreach
from .coverage import _active as _dry_run
from ..graph.ir import DeviceData, TensorSpec, Value, arg_signature, make_node, node_key
from .resize import SPECIAL as RESIZE
from .scalars import lift_scalars
from .tensor import LazyTensor, Storage, live_storages, wrap_value
from .views import IDENTITY, functional_view_op, is_inplace_view_op, is_view_op, scatter
from ..ops import support as _support

aten = torch.ops.aten
LAZY_TYPE = "lazy"

# Time spent in capture since the last mark_step (reported as TraceTime), and
# how deep we are in dispatch (syncs inside dispatch subtract their own time).
trace_seconds = [0.0]
dispatch_depth = [0]


# --------------------------------------------------------------------- values
def data_value(host: torch.Tensor) -> Value:
    """Device data from a host tensor (the caller gives up the tensor)."""
    shapes.require_strided(host)
    return Value.of_data(DeviceData(TensorSpec.of(host.contiguous()), host=host.contiguous()))


def value_of(t: LazyTensor) -> Value:
    """The current value of ``t``, reading through its view steps."""
    storage = t._storage
    if not t._view:
        return storage.value
    cache = t._cache
    if cache is not None and cache[0] == storage.version:
        return cache[1]
    v = storage.value
    for step in t._view:
        v = apply_view(v, step)
    t._cache = (storage.version, v)
    return v


def apply_view(v: Value, step) -> Value:
    op, args, kwargs, index = step
    return emit(op, (v, *args), kwargs)[index]


def assign(t: LazyTensor, new: Value) -> None:
    """Write ``new`` as the contents of ``t`` (and of everything aliasing it)."""
    storage = t._storage
    if _dry_run[0] is not None:
        _dry_run[0].before_write(storage)
    if t._view:
        chain = [storage.value]
        for step in t._view[:-1]:
            chain.append(apply_view(chain[-1], step))
        for step, base in zip(reversed(t._view), reversed(chain)):
            new_base = scatter(emit, step, base, new)
            new = new_base
    storage.value = new
    storage.version += 1
    t._cache = None
    if new.pending:
        live_storages.add(storage)


# ----------------------------------------------------------------- recording
def emit(func, args, kwargs) -> list[Value]:
    """Record ``func`` on Values and constants; returns its output Values."""
    flat, tree = argtree.flatten(args, kwargs)
    return emit_flat(func, flat, tree)[0]


def emit_flat(func, flat: list, tree: tuple):
    """Record ``func`` on flattened arguments (Values where tensors were).

    Returns (output Values, the op's flat outputs as TensorSpec or Python
    values, their pytree), the latter two from memoized meta execution.
    """
    key = _plan_key(op_info(func), flat, tree)
    plan = _emit_plans.get(key) if key is not None else None
    if plan is not None:
        inputs = [v for v in flat if type(v) is Value]
        where = debug.user_location() if debug.tracking_locations() else None
        outs = make_node(func, flat, tree, inputs, plan.specs, "", where, plan.key)
        return outs, plan.out_flat, plan.out_tree
    inputs, placeholders = _placeholders(flat)
    out_flat, out_tree = shapes.infer(func, placeholders, tree)
    _store_plan(_emit_plans, key, func, flat, tree, out_flat, out_tree)
    return _node(func, flat, tree, inputs, out_flat), out_flat, out_tree


def _placeholders(flat: list):
    """(the Values of ``flat``, ``flat`` with Values as shape placeholders)."""
    inputs = []
    placeholders = []
    for a in flat:
        if type(a) is Value:
            inputs.append(a)
            placeholders.append(shapes.Placeholder(a.spec))
        else:
            placeholders.append(a)
    return inputs, placeholders


def _node(func, flat, tree, inputs, out_flat) -> list[Value]:
    specs = [o if type(o) is TensorSpec else None for o in out_flat]
    return make_node(func, flat, tree, inputs, specs, _const_repr(flat, tree),
                     debug.user_location() if debug.tracking_locations() else None)


def _const_repr(flat, tree) -> str:
    return repr([None if type(a) is Value else a for a in flat]) + repr(tree)


# ------------------------------------------------------------- record plans
# A training step records the same ops on the same shapes every step. What
# ``record`` decides about an op from its kind, input specs and constants
# (supported, not empty, dtypes, output specs, the constant part of the node
# key) is kept as a plan and reused; only the denied-op check is repeated,
# since a failed compile can deny an op at any time.
class OpInfo:
    """Per-op facts, kept on the OpOverload itself (``func._lazy_mlir``):
    looking them up costs an attribute read, where a dict keyed by the op
    calls OpOverload's Python ``__hash__``."""

    __slots__ = ("kind", "host_index", "counter", "bounds", "identity", "__weakref__")

    def __init__(self, func):
        self.kind = _kind(func)
        self.identity = func in IDENTITY  # a view op that records no step
        self.host_index = func in _HOST_INDEX_OPS
        self.bounds = bounds.checked(func)  # takes index tensors: see bounds.py
        self.counter = "lazy::" + func.__name__.split(".")[0]


def op_info(func) -> OpInfo:
    try:
        return func._lazy_mlir
    except AttributeError:
        info = OpInfo(func)
        try:
            func._lazy_mlir = info
        except (AttributeError, TypeError):  # not an OpOverload: compute each time
            pass
        return info


class _Plan:
    __slots__ = ("out_flat", "out_tree", "specs", "key", "single")

    def __init__(self, func, flat, tree, out_flat, out_tree):
        self.out_flat = out_flat
        self.out_tree = out_tree
        self.specs = [o if type(o) is TensorSpec else None for o in out_flat]
        self.key = node_key(func, _const_repr(flat, tree), self.specs)
        self.single = len(out_flat) == 1 and out_tree is None


_plans: dict = {}  # record: ops that passed its checks
_emit_plans: dict = {}  # emit: ops capture records on its own behalf (views, scatters)
_PLANS_MAX = 1 << 16  # a NaN constant never hits (nan != nan): bound the table

_EXACT_CONSTS = shapes.EXACT_CONSTS


def _plan_key(info, vals, tree):
    """(op, argument tree, input specs and constants keyed as
    ``shapes.const_key`` does), or None when a constant cannot be keyed."""
    parts = []
    for v in vals:
        t = type(v)
        if t is Value:
            parts.append(v.spec)
        elif t in _EXACT_CONSTS:
            parts.append((t, v))
        elif t is float:
            parts.append((t, repr(v)))  # -0.0 and nan are their own constants
        else:
            return None
    return (info, tree, tuple(parts))


def _store_plan(table, key, func, flat, tree, out_flat, out_tree) -> None:
    if key is None:
        return
    for o in out_flat:
        if type(o) is TensorSpec and 0 in o.shape:  # materialized at once: not planned
            return
    if len(table) >= _PLANS_MAX:
        table.clear()
    table[key] = _Plan(func, flat, tree, out_flat, out_tree)


def _run_plan(plan: _Plan, info: OpInfo, func, vals, tree, bare=False):
    inputs = [v for v in vals if type(v) is Value]
    where = debug.user_location() if debug.tracking_locations() else None
    outs = make_node(func, vals, tree, inputs, plan.specs, "", where, plan.key)
    metrics.counter_inc(info.counter)
    if plan.single:
        return outs[0] if bare else wrap_value(outs[0])
    it = iter(outs)
    result = [wrap_value(next(it)) if type(o) is TensorSpec else o for o in plan.out_flat]
    return tree_unflatten(result, plan.out_tree)


def _guarded(func, vals: list, tree) -> list:
    """``vals`` with ``func``'s index arguments clamped into range and checked
    (``bounds.guard``), flattened again."""
    args, kwargs = argtree.unflatten(vals, tree)
    args, kwargs = bounds.guard(func, args, kwargs, emit)
    return argtree.flatten(args, kwargs)[0]


def _to_value(a, host_ok=False):
    if type(a) is LazyTensor:  # the common case first, inlining value_of's
        return value_of(a) if a._view else a._storage.value
    if isinstance(a, LazyTensor):
        return value_of(a)
    if isinstance(a, torch.Tensor):
        if a.dim() == 0 or host_ok:  # 0-dim CPU tensors are allowed, as with CUDA
            return data_value(a.detach().clone())
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two "
            f"devices, lazy:0 and {a.device}! Move the tensor with .to('lazy') first.")
    if isinstance(a, torch.device) and a.type == LAZY_TYPE:
        return torch.device("cpu")
    return a


# Ops that take CPU index tensors with device tensors, as CUDA does.
_HOST_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten._index_put_impl.default}


# What shape inference raises for an op whose output shape depends on the
# values (or that has no meta kernel): such an op runs eagerly, on real data.
_NO_STATIC_SHAPE = (NotImplementedError, torch._subclasses.fake_tensor.DynamicOutputShapeException,
                    torch._subclasses.fake_tensor.DataDependentOutputException)

_scalar_data: dict = {}


def _make_scalar(x, dtype):
    """A 0-dim lazy tensor holding a lifted scalar. The tensors of recent
    (value, dtype) pairs are reused, so a constant like Adam's beta is uploaded
    once, not every step, and costs no new wrapper tensor. Sharing one is
    safe: only capture sees it (as an argument of the op it was lifted
    from), and nothing writes into a lifted scalar."""
    key = (x, type(x), dtype)
    t = _scalar_data.get(key)
    if t is None:
        if len(_scalar_data) > 4096:
            _scalar_data.clear()
        t = _scalar_data[key] = wrap_value(data_value(torch.tensor(x, dtype=dtype)))
    return t


def record(func, args, kwargs, bare=False):
    """Record a functional op on lazy tensors; returns lazy tensors. With
    ``bare``, an op of one output recorded from its plan returns its Value
    instead (no wrapper tensor): the in-place path only assigns it."""
    func, args, kwargs = lift_scalars(func, args, kwargs, LazyTensor, _make_scalar, record)
    info = op_info(func)
    flat, tree = argtree.flatten(args, kwargs)
    host_ok = info.host_index
    vals = [_to_value(a, host_ok) for a in flat]
    key = _plan_key(info, vals, tree)
    plan = _plans.get(key) if key is not None else None
    denied = (_support.denied_signature(func, lambda: arg_signature(vals))
              if _support.DENIED_SIGNATURES else None)
    if (plan is not None and _dry_run[0] is None and _support.op_is_supported(func)
            and denied is None):
        if info.bounds:
            vals = _guarded(func, vals, tree)
        return _run_plan(plan, info, func, vals, tree, bare)
    from .fallback import UNSUPPORTED_DTYPES, dtypes_supported, run_eagerly
    from ..ops.support import decomposed_before_import, op_is_supported
    if empty_inputs.runs_eagerly(func, vals, tree):
        folded = empty_inputs.fold(func, vals, tree) if empty_inputs.all_inputs_empty(vals) else None
        if folded is not None:
            metrics.counter_inc("folded::" + func.__name__.split(".")[0])
            return tree_map(lambda o: wrap_value(data_value(o.clone()))
                            if isinstance(o, torch.Tensor) else o, folded)
        from .fallback import run_eagerly
        return run_eagerly(func, args, kwargs, why="a non-empty result of an empty input")
    if not dtypes_supported(vals):
        return run_eagerly(func, args, kwargs, why="unsupported dtype")
    if denied is not None:
        return run_eagerly(func, args, kwargs, why=denied.split("\n")[0])
    if not op_is_supported(func):
        from . import decompose
        how = decompose.plan(func, vals, tree)
        if type(how) is not str:
            if info.bounds:
                args, kwargs = bounds.guard(func, args, kwargs, emit, value_of)
            elif bounds.takes_integer_tensors(vals):
                return decompose.run(func, how, args, kwargs)
            with bounds.within(func):  # its own index ops: checked above, or made in range
                return decompose.run(func, how, args, kwargs)
        return run_eagerly(func, args, kwargs)
    if decomposed_before_import(func):
        from . import decompose
        if decompose.import_decomposition_reads_values(func, vals, tree):
            return run_eagerly(func, args, kwargs, why="its decomposition reads tensor values")
    inputs, placeholders = _placeholders(vals)
    try:
        out_flat, out_tree = shapes.infer(func, placeholders, tree)
    except _NO_STATIC_SHAPE as e:  # nonzero, masked_select, unique_consecutive, ...
        return run_eagerly(func, args, kwargs,
                           why=f"output shape depends on the data ({type(e).__name__})")
    for o in out_flat:
        if type(o) is TensorSpec and o.dtype in UNSUPPORTED_DTYPES:  # .cdouble(), ...
            return run_eagerly(func, args, kwargs, why=f"unsupported dtype {o.dtype}")
    _store_plan(_plans, key, func, vals, tree, out_flat, out_tree)
    if info.bounds:
        vals = _guarded(func, vals, tree)
        inputs = [v for v in vals if type(v) is Value]
    outs = _node(func, vals, tree, inputs, out_flat)
    metrics.counter_inc(info.counter)
    if len(out_flat) == 1 and out_tree is None:
        return wrap_value(outs[0])
    it = iter(outs)
    result = [wrap_value(next(it)) if type(o) is TensorSpec else o for o in out_flat]
    return tree_unflatten(result, out_tree)


# ------------------------------------------------------------------ dispatch
@functools.lru_cache(maxsize=None)
def _kind(func) -> str:
    schema = func._schema
    if func in _SPECIAL:
        return "special"
    if schema.name.startswith("aten::_foreach_"):  # lists in, lists or nothing out
        return "foreach"
    if not any(isinstance(r.type, torch.TensorType) or "Tensor" in str(r.type)
               for r in schema.returns):
        return "sync"
    if is_inplace_view_op(func):
        return "inplace_view"
    if is_view_op(func):
        return "view"
    if schema.is_mutable:
        return "mutating"
    return "functional"


def dispatch(func, args, kwargs):
    t0 = time.perf_counter()
    dispatch_depth[0] += 1
    try:
        try:  # op_info, inlined: a call less on every dispatch
            kind = func._lazy_mlir.kind
        except AttributeError:
            kind = op_info(func).kind
        if kind == "functional":
            return record(func, args, kwargs)
        if kind == "view":
            return _view(func, args, kwargs)
        if kind == "mutating":
            return _mutating(func, args, kwargs)
        if kind == "special":
            return _SPECIAL[func](func, args, kwargs)
        if kind == "inplace_view":
            return _inplace_view(func, args, kwargs)
        if kind == "foreach":
            return _foreach.dispatch(func, args, kwargs)
        return _sync_op(func, args, kwargs)
    finally:
        dispatch_depth[0] -= 1
        trace_seconds[0] += time.perf_counter() - t0


from . import tensor as _tensor  # noqa: E402
_tensor._dispatch = dispatch  # LazyTensor.__torch_dispatch__ calls it


def _view(func, args, kwargs):
    base = args[0]
    info = op_info(func)
    if info.identity:
        return LazyTensor(base.spec, base._storage, base._view)
    placeholders, tree = argtree.flatten((shapes.Placeholder(base.spec), *args[1:]), kwargs)
    out_flat, out_tree = shapes.infer(func, placeholders, tree)
    metrics.counter_inc(info.counter)
    result = []
    rest, kw = tuple(args[1:]), dict(kwargs)  # shared by the outputs' steps: never written
    for i, spec in enumerate(out_flat):
        result.append(LazyTensor(spec, base._storage, base._view + ((func, rest, kw, i),)))
    if out_tree is None:
        return result[0]
    return tree_unflatten(result, out_tree)


def _inplace_view(func, args, kwargs):
    """``t_``, ``transpose_``, ...: the tensor becomes a view of what it was."""
    t = args[0]
    step = (functional_view_op(func), tuple(args[1:]), dict(kwargs), 0)
    with torch.utils._mode_utils.no_dispatch():
        # Change the wrapper's sizes and strides the way PyTorch's own
        # return_and_correct_aliasing does: run the op with meta in TLS.
        was = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            func(*args, **kwargs)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(was)
    t._view = t._view + (step,)
    t._cache = None
    t.spec = TensorSpec(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
    metrics.counter_inc("lazy::" + func.__name__.split(".")[0])
    return t


@functools.lru_cache(maxsize=None)
def _functional_of(func):
    packet = getattr(aten, func.__name__.split(".")[0].rstrip("_"), None)
    if packet is not None and func._overloadname in packet.overloads():
        return getattr(packet, func._overloadname)
    return None


@functools.lru_cache(maxsize=None)
def _written_args(func) -> tuple[str, ...]:
    return tuple(a.name for a in func._schema.arguments if a.alias_info and a.alias_info.is_write)


_OTHER_WRITES = object()


def _self_update(func):
    """For an op that writes only its first positional argument (``add_``,
    ``lerp_``): its functional form (None when it has none); for any other
    mutating op ``_OTHER_WRITES``. Kept on the op: ``func._schema.arguments``
    builds new Python objects on every read."""
    try:
        return func._lazy_mlir_self_update
    except AttributeError:
        pass
    if _written_args(func) == ("self",) and not func._schema.arguments[0].kwarg_only:
        how = _functional_of(func)
    else:
        how = _OTHER_WRITES
    try:
        func._lazy_mlir_self_update = how
    except (AttributeError, TypeError):
        pass
    return how


# In-place calls whose shape and dtype check passed, keyed as ``_checked_key``
# says. A float argument enters by its type only: the check compares shapes
# and dtypes, and Adam's step size, a new float every step, would otherwise
# run the meta kernel on every step. A value the op itself refuses is still
# refused, by the functional op's own shape inference or by the compile.
_inplace_checked: set = set()


def _checked_key(info, flat, tree):
    parts = []
    for a in flat:
        t = type(a)
        if t is LazyTensor:
            parts.append(a.spec)
        elif t is float:
            parts.append(float)
        elif t in _EXACT_CONSTS:
            parts.append((t, a))
        else:
            return None
    return (info, tree, tuple(parts))


def _mutating(func, args, kwargs):
    fn = _self_update(func)
    if fn is not _OTHER_WRITES:
        self = args[0]
        if fn is None:
            from .fallback import run_eagerly
            return run_eagerly(func, args, kwargs)
        # Check shapes and dtypes the way the in-place kernel would.
        flat, tree = argtree.flatten(args, kwargs)
        key = _checked_key(op_info(func), flat, tree)
        if key is None or key not in _inplace_checked:
            shapes.infer(func, [shapes.Placeholder(a.spec) if isinstance(a, LazyTensor)
                                else a for a in flat], tree)
            if key is not None:
                if len(_inplace_checked) >= _PLANS_MAX:
                    _inplace_checked.clear()
                _inplace_checked.add(key)
        out = record(fn, args, kwargs, bare=True)
        if type(out) is Value:  # recorded from its plan
            if out.spec.dtype == self.dtype:  # the common case: no cast
                assign(self, out)
                return self
            out = wrap_value(out)
        if out.dtype != self.dtype:
            out = aten._to_copy.default(out, dtype=self.dtype)
        assign(self, value_of(out))
        return self
    written = _written_args(func)
    if not all(n.startswith("out") for n in written):
        return _mutating_args(func, written, args, kwargs)
    # out= variants: compute functionally, then copy into the outputs.
    outs = [kwargs[n] for n in written if n in kwargs]
    rest = {k: v for k, v in kwargs.items() if k not in written}
    result = func.overloadpacket(*args, **rest)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for o, r in zip(outs, results):
        if tuple(o.shape) != tuple(r.shape):
            raise RuntimeError(
                f"lazy-mlir: {func} would resize its out= tensor from {tuple(o.shape)} to "
                f"{tuple(r.shape)}; call the op without out= on lazy tensors")
        o.copy_(r)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _functional_variant(func):
    """``native_batch_norm`` -> ``_native_batch_norm_legit_functional``: the op
    functionalization uses, returning the mutated arguments' new values last."""
    if func is aten.native_batch_norm.default:
        return aten._native_batch_norm_legit_functional.default
    packet = getattr(aten, func.__name__.split(".")[0] + "_functional", None)
    if packet is not None and "default" in packet.overloads():
        return packet.default
    return None


def _mutating_args(func, written, args, kwargs):
    """Ops that write arguments other than ``self`` (batch norm's running
    statistics): record the functional variant, then write the new values."""
    from .fallback import run_eagerly
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args), **kwargs)
    targets = [bound.get(n) for n in written]
    if all(t is None for t in targets):  # nothing to write: a plain functional call
        return record(func, args, kwargs)
    variant = _functional_variant(func)
    if variant is None or not all(isinstance(t, LazyTensor) for t in targets):
        return run_eagerly(func, args, kwargs)
    outs = record(variant, args, kwargs)
    n = len(func._schema.returns)
    for t, new in zip(targets, outs[n:]):
        assign(t, value_of(new))
    return tuple(outs[:n]) if n > 1 else outs[0]


def _sync_op(func, args, kwargs):
    """Ops that return Python values (``item``, ``equal``, ...): run on host."""
    if func._schema.is_mutable:  # (_amp_foreach_*_, _fused_adam_): to_host gives the
        # device data's own host tensor, which must not be written: copies, written back
        return _foreach.run_eagerly(func, args, kwargs, "it writes arguments and returns nothing")
    from .sync import to_host
    metrics.counter_inc("sync::" + func.__name__.split(".")[0])
    flat, tree = argtree.flatten(args, kwargs)  # (not torch's pytree: a step's item() pays it)
    hargs, hkwargs = argtree.unflatten(
        [to_host(a) if isinstance(a, LazyTensor) else a for a in flat], tree)
    return func(*hargs, **hkwargs)


# ------------------------------------------------------------ special ops
def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if isinstance(src, LazyTensor):
        out = src
        if src.dtype != dst.dtype:
            out = aten._to_copy.default(src, dtype=dst.dtype)
        if tuple(out.shape) != tuple(dst.shape):
            out = aten.expand.default(out, list(dst.shape))
        if dst._view or tuple(out.shape) != tuple(dst.shape) or out is src:
            out = aten.clone.default(out)
        assign(dst, value_of(out))
    else:
        host = src.detach().to(dst.dtype).expand(dst.shape).contiguous().clone()
        assign(dst, data_value(host))
    return dst


def _to_copy(func, args, kwargs):
    src = args[0]
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != LAZY_TYPE:
        from .sync import to_host
        host = to_host(src)
        rest = {k: v for k, v in kwargs.items() if k != "device"}
        out = aten._to_copy.default(host, **rest)
        return out if out is not host else host.clone()
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
    return record(func, args, kwargs)


def _random(func, args, kwargs):
    """Random fills are drawn on the host from PyTorch's CPU generator, so
    ``torch.manual_seed`` gives the same numbers as eager CPU."""
    from .sync import to_host
    t = args[0]
    flat, tree = tree_flatten((args[1:], kwargs))
    host_flat = [to_host(a) if isinstance(a, LazyTensor) else a for a in flat]
    hargs, hkwargs = tree_unflatten(host_flat, tree)
    host = torch.empty(t.shape, dtype=t.dtype)
    func(host, *hargs, **hkwargs)
    assign(t, data_value(host))
    return t


def _native_dropout(func, args, kwargs):
    """Dropout with its mask drawn inside the graph (see ``random``)."""
    from . import random
    x, p = args[0], args[1]
    train = args[2] if len(args) > 2 else kwargs.get("train")
    if not train or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    metrics.counter_inc("lazy::native_dropout")
    out, keep = random.dropout(emit, value_of(x), p)
    return wrap_value(out), wrap_value(keep)


_RANDOM = [aten.normal_.default, aten.uniform_.default, aten.bernoulli_.float,
           aten.bernoulli_.Tensor, aten.random_.default, getattr(aten.random_, "from"), aten.random_.to,
           aten.exponential_.default, aten.geometric_.default, aten.log_normal_.default,
           aten.cauchy_.default]
def _native_batch_norm(func, args, kwargs):
    """Its schema says functional, but in training it updates the running
    statistics in place, as the CPU and CUDA kernels do."""
    names = [a.name for a in func._schema.arguments]
    bound = dict(zip(names, args), **kwargs)
    if bound.get("training"):
        return _mutating_args(func, ["running_mean", "running_var"], args, kwargs)
    if func is aten._native_batch_norm_legit.default:
        out = _mutating_args(func, ["running_mean", "running_var"], args, kwargs)
    else:
        out = record(func, args, kwargs)
    return _no_saved_stats(out)


def _no_saved_stats(out):
    """Batch norm in eval mode saves no statistics: the CPU kernels return
    them empty, although the meta kernels (and so the graph) say [C]."""
    empty = [torch.empty(0, dtype=o.dtype, device=o.device) for o in out[1:3]]
    return (out[0], *empty, *out[3:])


_SPECIAL = {aten.copy_.default: _copy_, aten._to_copy.default: _to_copy,
            aten.native_dropout.default: _native_dropout,
            aten.native_batch_norm.default: _native_batch_norm,
            aten._native_batch_norm_legit.default: _native_batch_norm,
            aten._native_batch_norm_legit_no_training.default: _native_batch_norm}
_SPECIAL.update({f: _random for f in _RANDOM})
_SPECIAL.update(RESIZE)
