"""Recording: lazy tensors' values as graph nodes, and the plans that make
recording an op cheap.

``value_of``/``assign`` read and write a tensor's value through its view
steps; ``emit``/``emit_flat`` record an op on Values (capture's own ops: view
steps, scatters, index guards, random bits; the front ends' traces);
``data_value`` makes device data from a host tensor. The record plans of
``dispatch.record`` (``_plan_key``, ``_store_plan``, ``_run_plan``) are kept
here with emit's. Routing ``__torch_dispatch__`` is ``dispatch.py``'s.
"""
from __future__ import annotations

import weakref

import torch
from torch.utils._pytree import tree_unflatten

from ..graph import argtree
from . import bounds, offsets, shapes
from ..graph import debug
from .. import metrics
from ..graph.ir import DeviceData, TensorSpec, Value, make_node, node_key, planned_node
from ..graph.ir import _is_contiguous
from .kinds import kind as _kind
from .state import dry_run as _dry_run, emit_plans as _emit_plans
from .state import empty_values as _empty_values, scalar_tensors as _scalar_data
from .tensor import LazyTensor, live_storages, wrap_value
from .views import IDENTITY, write_back

aten = torch.ops.aten
LAZY_TYPE = "lazy"
_SLICE, _SELECT = aten.slice.Tensor, aten.select.int


# --------------------------------------------------------------------- values
def data_value(host: torch.Tensor) -> Value:
    """Device data from a host tensor (the caller gives up the tensor)."""
    shapes.require_strided(host)
    return Value.of_data(DeviceData(TensorSpec.of(host.contiguous()), host=host.contiguous()))


def empty_value(shape: tuple, dtype: torch.dtype) -> Value:
    """The value of a new tensor with no elements (a 0 in ``shape``): device
    data, one per (shape, dtype), shared. Nothing computes or writes device
    data (a write rebinds the tensor's storage), so sharing it is safe, and
    a graph that reads it takes the same input every step, uploaded once:
    ``transformers``' KV cache makes 4 ``torch.tensor([])`` a GPT-2 forward
    and concatenates onto them."""
    key = (shape, dtype)
    v = _empty_values.get(key)
    if v is None:
        if len(_empty_values) >= 1024:
            _empty_values.clear()
        v = _empty_values[key] = data_value(torch.empty(shape, dtype=dtype))
    return v


def value_of(t: LazyTensor) -> Value:
    """The current value of ``t``, reading through its view steps."""
    storage = t._storage
    if not t._view:
        return storage.value
    cache = t._cache
    if cache is not None and cache[0] == storage.version:
        return cache[1]
    v = storage.value
    steps = t._view
    if _layouts and any(s[0] is _VIEW for s in steps):  # (rare test first: every view read)
        v = _in_layout(storage, v)
    lift = offsets.liftable(steps)
    if (any(s[0] is _AS_STRIDED for s in steps) and not v.spec.offset
            and not _is_contiguous(v.spec.shape, v.spec.stride)):  # (rare test first: every view read)
        v, steps = _in_memory_order(storage, v, steps)
    k, dtype = _from_storage(steps, v.spec)
    if k:
        steps = steps[k:]
        if dtype is not v.spec.dtype:
            v = _storage_as(v, dtype)
    for step in steps:
        v = apply_view(v, step, lift)
    t._cache = (storage.version, v)
    return v


_AS_STRIDED, _VIEW_DTYPE, _VIEW = aten.as_strided.default, aten.view.dtype, aten.view.default
# storage -> the spec its memory is laid out as, where a write back through a
# view left its value with other strides (``assign``): the layout of the
# tensor that made the storage, which an ``as_strided`` addresses
_layouts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _in_layout(storage, v: Value) -> Value:
    """The storage value ``v`` with the strides of the storage's memory where
    a write back through a view left it with others and that memory is
    contiguous: a ``view`` reads the memory's layout. After an ``index_add_``
    through ``x.permute(1, 0)``, ``x.view(4, 3)`` read the value with the
    permute's strides, and shape inference raised where eager reshapes its
    contiguous memory (fuzzer seed 900475)."""
    layout = _layouts.get(storage)
    if (layout is None or v.spec.stride == layout.stride or v.spec.shape != layout.shape
            or not _is_contiguous(layout.shape, layout.stride)):
        return v
    return emit(aten.clone.default, (v,), {"memory_format": torch.contiguous_format})[0]


def _in_memory_order(storage, v: Value, steps):
    """``v`` (a storage value with non-contiguous strides) as a contiguous
    value of the storage's memory order, and the view steps to apply to it:
    an ``as_strided`` addresses memory. A write back through a permute leaves
    the value with the permute's strides over a contiguous memory (fuzzer
    seed 400113: a contiguous clone); a fresh result laid out as its input
    (``mul`` of a transposed tensor) is in memory as its strides say: its
    dimensions by falling stride, then contiguous, read from the last
    ``as_strided`` on (fuzzer seed 800169: the clone read it row-major)."""
    layout = _layouts.get(storage, v.spec)
    order = sorted(range(len(layout.shape)), key=lambda d: -layout.stride[d])
    k = max(i for i, s in enumerate(steps) if s[0] is _AS_STRIDED)
    if _is_contiguous(layout.shape, layout.stride) or order == list(range(len(order))) \
            or any(s[0] is _VIEW_DTYPE for s in steps) or not _is_contiguous(
                [layout.shape[d] for d in order], [layout.stride[d] for d in order]):
        return emit(aten.clone.default, (v,), {"memory_format": torch.contiguous_format})[0], steps
    v = emit(aten.permute.default, (v, order), {})[0]
    return emit(aten.clone.default, (v,), {"memory_format": torch.contiguous_format})[0], steps[k:]


def _from_storage(steps, spec: TensorSpec) -> tuple[int, torch.dtype | None]:
    """The index of the last ``as_strided`` step, which reads the storage
    itself (its strides and offset address the storage, not its input), or
    0; and the dtype it addresses the storage in (that of a ``view(dtype)``
    before it: seed 800193, an as_strided of a view(int32) of an empty
    narrow of a float32 storage). Read from the storage's value, it sees the
    elements eager's does; read from its input's value, a fresh tensor in
    the graph, it saw that tensor's elements only (an as_strided of an empty
    narrow read past its 0 elements and the graph failed). Only over a
    contiguous storage, and not past a complex view (``view_as_real``)."""
    k, dtype, dtype_at_k = 0, spec.dtype, spec.dtype
    for i, step in enumerate(steps):
        if step[0] is _AS_STRIDED:
            k, dtype_at_k = i, dtype
        elif step[0] is _VIEW_DTYPE:
            dtype = step[1][0] if step[1] else step[2]["dtype"]
        elif step[0] in _COMPLEX_VIEWS:
            return 0, None
    if k and (spec.offset or not _is_contiguous(spec.shape, spec.stride)
              or (dtype_at_k is not spec.dtype and (dtype_at_k.is_complex or spec.dtype.is_complex))):
        return 0, None
    return k, dtype_at_k


_COMPLEX_VIEWS = (aten.view_as_real.default, aten.view_as_complex.default)


def _storage_as(v: Value, dtype: torch.dtype) -> Value:
    """The contiguous storage value ``v`` as a flat tensor of ``dtype``, as
    an ``as_strided`` of a ``view(dtype)`` addresses it (its bytes past the
    last whole element of ``dtype`` dropped, as eager's bounds do)."""
    flat = emit(aten.view.default, (v, [-1]), {})[0]
    size, wide = v.spec.dtype.itemsize, dtype.itemsize
    whole = flat.spec.shape[0] - flat.spec.shape[0] % (wide // size) if wide > size else None
    if whole is not None and whole != flat.spec.shape[0]:
        flat = emit(aten.slice.Tensor, (flat, 0, 0, whole), {})[0]
    flat = emit(_VIEW_DTYPE, (flat, dtype), {})[0]
    # (a clone: torch-mlir's as_strided rewrite indexes the tensor that made
    # the storage, through view(dtype)s, and yielded its dtype's elements)
    return emit(aten.clone.default, (flat,), {})[0]


def apply_view(v: Value, step, lift: bool = True) -> Value:
    """``v`` viewed by ``step``; with ``lift``, a slice or a select at a
    runtime offset where ``offsets.read`` lifts it."""
    op, args, kwargs, index = step[:4]
    if lift and (op is _SLICE or op is _SELECT):
        out = offsets.read(emit, v, op, args, kwargs)
        if out is not None:
            return out
    if len(step) == 5:  # made from a ViewPlan: its node recorded without re-keying
        vp = step[4]
        plan = vp.node_plan
        if plan is not None and (v.spec is vp.base or v.spec == vp.base):
            where = debug.user_location() if debug.tracking_locations() else None
            return planned_node(op, [v, *vp.rest], vp.tree, plan.specs, plan.key, where)[index]
        flat = [v, *vp.rest]
        outs, _, _ = emit_flat(op, flat, vp.tree)
        if v.spec == vp.base:  # (a value whose strides differ from its tensor's: the slow path)
            vp.node_plan = _emit_plans.get(_plan_key(op_info(op), flat, vp.tree))
        return outs[index]
    return emit(op, (v, *args), kwargs)[index]


class ViewPlan:
    """What a view op on one base spec with one set of constants gives: its
    output specs (``specs``, ``out_tree``), the constants flattened
    (``rest``, ``tree``: the node's arguments after the base) and, once the
    view has been read (``apply_view``), the record plan of its node. A
    repeated step's views then cost a wrapper tensor each, and their reads a
    node each, with no shape inference or key built again."""

    __slots__ = ("base", "specs", "out_tree", "rest", "tree", "counter", "node_plan",
                 "container")

    def __init__(self, base, specs, out_tree, rest, tree, counter):
        self.base = base
        self.specs = specs
        self.out_tree = out_tree
        self.rest = rest
        self.tree = tree
        self.counter = counter
        self.node_plan = None
        self.container = flat_container(out_tree)


def assign(t: LazyTensor, new: Value) -> None:
    """Write ``new`` as the contents of ``t`` (and of everything aliasing it)."""
    storage = t._storage
    if _dry_run[0] is not None:
        _dry_run[0].before_write(storage)
    if t._view:
        if 0 in new.spec.shape:  # (a view of no elements: the write changes nothing,
            return               # and its scatter of none made lm.jit's module a hazard)
        chain = [storage.value]
        lift = offsets.liftable(t._view)
        for step in t._view[:-1]:
            chain.append(apply_view(chain[-1], step, lift))
        # (may raise: nothing written yet)
        new = write_back(emit, t._view, chain, new, t, _layouts.get(storage) if _layouts else None)
        if new.spec.stride != storage.value.spec.stride and storage not in _layouts:
            _layouts[storage] = storage.value.spec  # (the memory's layout: _in_memory_order)
    storage.value = new
    storage.version += 1
    t._cache = None
    if new.data is None:  # pending (the property costs a call)
        live_storages.add(storage)


def assign_each(tensors, news) -> None:
    """``assign(t, new)`` for each pair (a whole in-place foreach op's
    writes: an optimizer's update writes every parameter a dozen times a
    step), a tensor that is no view written without a call."""
    if _dry_run[0] is not None:
        for t, new in zip(tensors, news):
            assign(t, new)
        return
    add = live_storages.add
    for t, new in zip(tensors, news):
        if t._view:
            assign(t, new)
            continue
        storage = t._storage
        storage.value = new
        storage.version += 1  # (views of it re-read; a tensor that is no view caches nothing)
        if new.data is None and storage.seq is None:
            add(storage)


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
        where = debug.user_location() if debug.tracking_locations() else None
        outs = planned_node(func, flat, tree, plan.specs, plan.key, where)
        return outs, plan.out_flat, plan.out_tree
    out_flat, out_tree = shapes.infer(func, _placeholders(flat), tree)
    _store_plan(_emit_plans, key, func, flat, tree, out_flat, out_tree)
    return _node(func, flat, tree, out_flat), out_flat, out_tree


_POSITIONAL = {n: argtree.flatten((None,) * n, {})[1] for n in (1, 2, 3)}


def emit_kept(func, flat: list, kept: list, slot: int) -> list[Value]:
    """``emit`` of an op whose argument specs and constants are the same
    at every call from one place (``bounds``' guard of one record plan),
    ``flat`` all positional: its record plan is kept in ``kept[slot]``."""
    plan = kept[slot]
    if plan is not None:
        where = debug.user_location() if debug.tracking_locations() else None
        return planned_node(func, flat, _POSITIONAL[len(flat)], plan.specs, plan.key, where)
    tree = _POSITIONAL[len(flat)]
    outs = emit_flat(func, flat, tree)[0]
    kept[slot] = _emit_plans.get(_plan_key(op_info(func), flat, tree))
    return outs


def _placeholders(flat: list) -> list:
    """``flat`` with Values as shape placeholders."""
    return [shapes.Placeholder(a.spec) if type(a) is Value else a for a in flat]


def _node(func, flat, tree, out_flat) -> list[Value]:
    specs = [o if type(o) is TensorSpec else None for o in out_flat]
    return make_node(func, flat, tree, specs, _const_repr(flat, tree),
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


def flat_container(tree):
    """``tuple`` or ``list`` when the pytree ``tree`` is one of those holding
    leaves only (``native_layer_norm``'s three tensors, ``split``'s list),
    else None: such outputs are rebuilt without ``tree_unflatten``'s walk."""
    if tree is None or (tree.type is not tuple and tree.type is not list):
        return None
    n = tree.num_children
    if tree.num_leaves != n or not all(tree.child(i).is_leaf() for i in range(n)):
        return None
    return tree.type


def unflatten_outputs(result: list, tree, container):
    """``tree_unflatten(result, tree)``, ``container`` being ``flat_container(tree)``."""
    if container is tuple:
        return tuple(result)
    if container is list:
        return result
    return tree_unflatten(result, tree)


class _Plan:
    __slots__ = ("out_flat", "out_tree", "specs", "key", "single", "guard", "container")

    def __init__(self, func, flat, tree, out_flat, out_tree):
        self.out_flat = out_flat
        self.out_tree = out_tree
        self.specs = [o if type(o) is TensorSpec else None for o in out_flat]
        self.key = node_key(func, _const_repr(flat, tree), self.specs)
        self.single = len(out_flat) == 1 and out_tree is None
        self.container = flat_container(out_tree)
        self.guard = None  # an index-taking op's index positions and ranges (bounds.py)


# ``_plans`` (record's: ops that passed its checks) and ``_emit_plans`` (emit's:
# ops capture records on its own behalf, views and scatters) live in state.py.
_PLANS_MAX = 1 << 16  # a NaN constant never hits (nan != nan): bound the table

_EXACT_CONSTS = shapes.EXACT_CONSTS


def _plan_key(info, vals, tree):
    """(op, argument tree, input specs and constants keyed as
    ``shapes.const_key`` does), or None when a constant cannot be keyed."""
    parts = []
    for v in vals:
        t = type(v)
        if t is Value:
            parts.append(v.spec.key)  # (an int: hashed in C)
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
    where = debug.user_location() if debug.tracking_locations() else None
    outs = planned_node(func, vals, tree, plan.specs, plan.key, where)
    metrics.counter_inc(info.counter)
    if plan.single:
        return outs[0] if bare else wrap_value(outs[0])
    if bare and len(outs) == len(plan.out_flat):  # (a whole foreach op's outputs)
        return outs
    it = iter(outs)
    result = [wrap_value(next(it)) if type(o) is TensorSpec else o for o in plan.out_flat]
    return unflatten_outputs(result, plan.out_tree, plan.container)


def _guarded(func, vals: list, tree, plan=None) -> list:
    """``vals`` with ``func``'s index arguments clamped into range and checked
    (``bounds.guard``), flattened again; from the record plan's kept index
    positions where there is one (``bounds.guard_planned``)."""
    if plan is not None:
        return bounds.guard_planned(func, vals, tree, emit, plan, emit_kept)
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


def schema_facts(func) -> tuple:
    """(argument names, {name: default} of the arguments that have one, the
    number of returns) of ``func``, kept on the op: ``func._schema.arguments``
    builds new Python objects on every read (~3 us; batch norm and the fused
    optimizers bind their arguments by name on every call)."""
    try:
        return func._lazy_mlir_schema
    except AttributeError:
        schema = func._schema
        facts = (tuple(a.name for a in schema.arguments),
                 {a.name: a.default_value for a in schema.arguments if a.has_default_value()},
                 len(schema.returns))
        try:
            func._lazy_mlir_schema = facts
        except (AttributeError, TypeError):
            pass
        return facts


# Ops that take CPU index tensors with device tensors, as CUDA does.
_HOST_INDEX_OPS = {aten.index.Tensor, aten.index_put.default, aten._index_put_impl.default}


def _make_scalar(x, dtype):
    """A 0-dim lazy tensor holding a lifted scalar (a 1-dim one for a tuple of
    them: an op's hyperparameters, ``fused_optim``). The tensors of recent
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
