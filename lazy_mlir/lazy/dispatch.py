"""Routing: ``dispatch`` is the ``__torch_dispatch__`` of ``LazyTensor``.

It sorts each op by its kind (``kinds.kind``) into one of: a sync (the op
returns a Python value), a view, an in-place or ``out=`` op (recorded in its
functional form, then written back through views), an op with a handler of
its own (``_SPECIAL``: copies, random fills, dropout, batch norm, resize), a
foreach op, or a plain op, which ``record`` records (from its plan when it
has one), decomposes, or runs eagerly on the CPU (fallback). Recording
itself is ``capture.py``'s.

Importing this module installs ``dispatch`` as ``tensor._dispatch``.
"""
from __future__ import annotations

import time

import torch
from torch.utils._pytree import tree_map, tree_unflatten

from ..graph import argtree
from .. import metrics
from ..graph.ir import TensorSpec, Value, arg_signature
from ..ops import support as _support
from ..ops import subgraph as _subgraph
from . import bounds, decompose, eager_checks, empty_inputs, fallback, offsets, random, shapes
from . import collectives as _collectives
from . import host_eval as _host_eval
from . import foreach as _foreach
from . import fused_optim as _fused_optim
from . import recompute as _recompute
from . import tensor as _tensor
from .gc_hold import held as _gc_held, hold as _gc_hold
from .capture import (LAZY_TYPE, _EXACT_CONSTS, _PLANS_MAX, _guarded, _make_scalar, _node,
                      _placeholders, _plan_key, _run_plan, _store_plan, _to_value, assign,
                      data_value, emit, op_info, schema_facts, unflatten_outputs, value_of,
                      ViewPlan)
from .functional_variants import functional_variant
from .kinds import RANDOM as _RANDOM, SPECIAL_OPS, functional_of as _functional_of
from .kinds import written_args as _written_args
from .resize import SPECIAL as RESIZE
from . import multinomial as _multinomial, packed as _packed
from .scalars import lift_scalars
from .recompute import _open as _recompute_open
from .state import dispatch_depth, dry_run as _dry_run, inplace_checked as _inplace_checked
from .state import record_plans as _plans, trace_seconds, view_plans as _view_plans
from .supported import UNSUPPORTED_DTYPES, complex_rewritten, dtype_compiled, dtypes_supported
from .sync import current_target, to_host
from ..targets import narrows_int64
from .tensor import LazyTensor, new_view, wrap_value
from .overlap import check as check_overlap, check_source_dtype
from .views import check_write, functional_view_op

aten = torch.ops.aten
_SUBGRAPH = _subgraph.ops.subgraph.default

# What shape inference raises for an op whose output shape depends on the
# values (or that has no meta kernel): such an op runs eagerly, on real data.
_NO_STATIC_SHAPE = (NotImplementedError, torch._subclasses.fake_tensor.DynamicOutputShapeException,
                    torch._subclasses.fake_tensor.DataDependentOutputException)


def record(func, args, kwargs, bare=False):
    """Record a functional op on lazy tensors; returns lazy tensors. With
    ``bare``, an op recorded from its plan returns its output Value (a list
    of them when every output is a tensor) instead (no wrapper tensors): the
    in-place paths only assign them."""
    try:
        info = func._lazy_mlir
    except AttributeError:  # (no OpInfo yet: the op's first call)
        info = None
    if info is not None:
        out = _record_planned(info, func, args, kwargs, bare)
        if out is not _MISS:
            return out
    called = (func, args, kwargs)
    func, args, kwargs = lift_scalars(func, args, kwargs, LazyTensor, _make_scalar, record)
    info = op_info(func)
    flat, tree = argtree.flatten(args, kwargs)
    host_ok = info.host_index
    # (_to_value's common case inline: an optimizer's foreach op has a few per parameter)
    vals = [a._storage.value if type(a) is LazyTensor and not a._view else _to_value(a, host_ok)
            for a in flat]
    key = _plan_key(info, vals, tree)
    plan = _plans.get(key) if key is not None else None
    if plan is None and args is not called[1]:  # a number lifted: eager's checks of the call
        eager_checks.probe_call(*called, argtree.flatten, argtree.unflatten)
    denied = (_support.denied_signature(func, lambda: arg_signature(vals))
              if _support.DENIED_SIGNATURES or func in _support.FLOAT64_EAGER_OPS else None)
    if (plan is not None and _dry_run[0] is None and _support.op_is_supported(func)
            and denied is None):
        if info.bounds:
            vals = _guarded(func, vals, tree, plan)
        return _run_plan(plan, info, func, vals, tree, bare)
    # (``fallback.run_eagerly`` by attribute: tests and the OpInfo sweep wrap it)
    run_eagerly = fallback.run_eagerly
    if empty_inputs.runs_eagerly(func, vals, tree):
        folded = empty_inputs.fold(func, vals, tree) if empty_inputs.all_inputs_empty(vals) else None
        if folded is not None:
            metrics.counter_inc("folded::" + func.__name__.split(".")[0])
            return tree_map(lambda o: wrap_value(data_value(o.clone()))
                            if isinstance(o, torch.Tensor) else o, folded)
        return run_eagerly(func, args, kwargs, why="a non-empty result of an empty input")
    if not dtypes_supported(vals, func):
        return run_eagerly(func, args, kwargs, why="unsupported dtype")
    if denied is not None:
        return run_eagerly(func, args, kwargs, why=denied.split("\n")[0])
    if not _support.op_is_supported(func) and not complex_rewritten(func, vals):
        how = decompose.plan(func, vals, tree)
        if type(how) is not str:
            if info.bounds:
                args, kwargs = bounds.guard(func, args, kwargs, emit, value_of)
            elif bounds.takes_integer_tensors(vals):
                return decompose.run(func, how, args, kwargs, dispatch)
            with bounds.within(func):  # its own index ops: checked above, or made in range
                return decompose.run(func, how, args, kwargs, dispatch)
        return run_eagerly(func, args, kwargs)
    # (a backward's template is checked once for all its sizes when traced:
    # lazy/backward.py, ``decompose.reads_values_when_imported``)
    if _support.decomposed_before_import(func) and func is not _SUBGRAPH:
        if decompose.import_decomposition_reads_values(func, vals, tree):
            return run_eagerly(func, args, kwargs, why="its decomposition reads tensor values")
    try:
        out_flat, out_tree = shapes.infer(func, _placeholders(vals), tree)
    except _NO_STATIC_SHAPE as e:  # nonzero, masked_select, unique_consecutive, ...
        return run_eagerly(func, args, kwargs, why=shapes.no_shape_reason(e))
    except RuntimeError as e:
        # A meta kernel that refuses what eager's kernel computes from the
        # values (``x.repeat_interleave(counts)`` without ``output_size``)
        # raised in the user's program. Eager's kernel runs it, or raises
        # eager's own error where the call is wrong.
        return run_eagerly(func, args, kwargs, why=shapes.no_shape_reason(e))
    for o in out_flat:
        if (type(o) is TensorSpec and o.dtype in UNSUPPORTED_DTYPES  # .cdouble(), ...
                and not dtype_compiled(func, o.dtype)):
            return run_eagerly(func, args, kwargs, why=f"unsupported dtype {o.dtype}")
    _store_plan(_plans, key, func, vals, tree, out_flat, out_tree)
    if info.bounds:
        vals = _guarded(func, vals, tree, _plans.get(key) if key is not None else None)
    outs = _node(func, vals, tree, out_flat)
    metrics.counter_inc(info.counter)
    if len(out_flat) == 1 and out_tree is None:
        return wrap_value(outs[0])
    it = iter(outs)
    result = [wrap_value(next(it)) if type(o) is TensorSpec else o for o in out_flat]
    return tree_unflatten(result, out_tree)


_MISS = object()
# Constants a plan key takes as they are (``capture._plan_key``), and no
# number among them (``lift_scalars`` may lift one).
_PLAIN_CONSTS = frozenset({type(None), bool, str, torch.dtype, torch.memory_format,
                           torch.layout})
_DEVICE = torch.device
_CPU = torch.device("cpu")


def _record_planned(info, func, args, kwargs, bare):
    """``record`` of a repeated step's commonest op in one pass, or
    ``_MISS``: every argument a lazy tensor or a constant (no list or host
    tensor, no number ``lift_scalars`` would lift), its plan kept, the op
    allowed, no index to guard.
    The same node, key and outputs as ``record``'s plan path; what the pass
    reads (``value_of`` of a view) is cached, so ``record`` after a miss
    records nothing twice."""
    if info.bounds or _support.DENIED_SIGNATURES or _dry_run[0] is not None:
        return _MISS
    vals = []
    parts = []
    numbers = False
    for a in (*args, *kwargs.values()) if kwargs else args:
        t = type(a)
        if t is LazyTensor:
            v = value_of(a) if a._view else a._storage.value
            vals.append(v)
            parts.append(v.spec.key)
        elif t in _PLAIN_CONSTS:
            vals.append(a)
            parts.append((t, a))
        elif t is _DEVICE:
            if a.type == LAZY_TYPE:  # (as ``_to_value``: graphs are traced on the CPU)
                a = _CPU
            vals.append(a)
            parts.append((t, a))
        elif t is int or t is float:
            numbers = True
            vals.append(a)
            parts.append((t, a) if t is int else (t, repr(a)))
        else:
            return _MISS
    if numbers and _lifts_a_number(func, args):
        return _MISS
    tree = (len(args), (None,) * len(vals), tuple(kwargs))  # (argtree.flatten's, all leaves)
    plan = _plans.get((info, tree, tuple(parts)))
    if plan is None or not _support.op_is_supported(func):
        return _MISS
    return _run_plan(plan, info, func, vals, tree, bare)


def _lifts_a_number(func, args) -> bool:
    """Whether ``lift_scalars`` might lift one of ``args``' numbers (or has
    not yet read the op's rule): its rule by name, or a number other than 0
    and 1 at a position its general rule lifts. Numbers given by keyword are
    lifted only by the rules by name."""
    try:
        positions, _, by_name = func._lazy_mlir_lift
    except AttributeError:
        return True
    if by_name:
        return True
    n = len(args)
    for i, _ in positions:
        if i < n:
            a = args[i]
            if (type(a) is int or type(a) is float) and a != 0 and a != 1:
                return True
    return False


_foreach._record = record  # a foreach op recorded as one node (foreach._record_whole)
_fused_optim._record = record  # a fused optimizer update recorded as one node
_multinomial._record = record  # a multinomial off ATen's fast path, as it is


# ------------------------------------------------------------------ dispatch
def dispatch(func, args, kwargs):
    t0 = time.perf_counter()
    dispatch_depth[0] += 1
    try:
        try:  # op_info, inlined: a call less on every dispatch
            kind = func._lazy_mlir.kind
        except AttributeError:
            kind = op_info(func).kind
        if _gc_held[0] is None and kind != "sync":  # a step's first op (gc_hold.py)
            _gc_hold()
        if _recompute_open[0] is not None and dispatch_depth[0] == 1 and kind in _TIED_KINDS:
            if _recompute.active():
                return _dispatch_tied(func, args, kwargs)
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
        if kind == "collective":  # torch.ops._c10d_functional.*: a cut point (collectives.py)
            return _collectives.dispatch(func, args, kwargs)
        return _sync_op(func, args, kwargs)
    finally:
        dispatch_depth[0] -= 1
        trace_seconds[0] += time.perf_counter() - t0


_TIED_KINDS = frozenset({"functional", "mutating", "special"})


def _dispatch_tied(func, args, kwargs):
    """``dispatch`` of an op of a checkpoint's recompute: what it reads from
    before the recompute tied to the backward (``recompute.py``)."""
    args, kwargs = _recompute.tie_inputs(func, args, kwargs, emit, value_of, wrap_value,
                                         LazyTensor)
    out = dispatch(func, args, kwargs)
    written = _recompute._written(func)
    _recompute.note_made(out, [a for a, w in zip(args, written) if w])
    return out


_tensor._dispatch = dispatch  # the hook LazyTensor.__torch_dispatch__ calls (tensor.py)


def _view(func, args, kwargs):
    base = args[0]
    info = op_info(func)
    if info.identity:
        return new_view(base.spec, base._storage, base._view)
    key = _view_key(info, base.spec.key, args, kwargs)
    vp = _view_plans.get(key) if key is not None else None
    if vp is None:
        placeholders, tree = argtree.flatten((shapes.Placeholder(base.spec), *args[1:]), kwargs)
        out_flat, out_tree = shapes.infer(func, placeholders, tree)
        vp = ViewPlan(base.spec, out_flat, out_tree, placeholders[1:], tree, info.counter)
        if key is not None:
            if len(_view_plans) >= _PLANS_MAX:
                _view_plans.clear()
            _view_plans[key] = vp
    metrics.counter_inc(vp.counter)
    # (the constants are shared by the outputs' steps: never written)
    rest, kw = args[1:], dict(kwargs) if kwargs else kwargs
    storage, steps = base._storage, base._view
    specs = vp.specs
    if vp.out_tree is None:
        return new_view(specs[0], storage, steps + ((func, rest, kw, 0, vp),))
    return unflatten_outputs([new_view(spec, storage, steps + ((func, rest, kw, i, vp),))
                              for i, spec in enumerate(specs)], vp.out_tree, vp.container)


def _view_key(info, spec_key, args, kwargs):
    """(op, base spec, constants) for ``_view_plans``, or None (a kwarg, or a
    constant other than an int, None or a list of ints: the slow path). Ints
    only, so that no two constants that compare equal (``1``, ``True``,
    ``1.0``) share a key. The op enters as its ``OpInfo``, hashed by
    identity (an OpOverload's ``__hash__`` is a Python call)."""
    if kwargs:
        return None
    parts = [info, spec_key]
    for a in args[1:]:
        t = type(a)
        if t is int or a is None:
            parts.append(a)
        elif t is list or t is tuple:
            for x in a:
                if type(x) is not int:
                    return None
            parts.append((t, *a))
        else:
            return None
    return tuple(parts)


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


_OTHER_WRITES = object()


def _host_written_by_lazy(func, host) -> None:
    """A CPU tensor written in place from lazy arguments (``A[i] = 1.0``
    with lazy ``i``): eager refuses a CPU tensor written from CUDA ones."""
    raise RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{host.device} and lazy:0! ({func} writes into the {host.device} tensor with lazy "
        f"arguments: move that tensor to the lazy device with .to('lazy'), or the lazy ones "
        f"to the CPU with .cpu())")


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


# ``_inplace_checked`` (state.py): in-place calls whose shape and dtype check
# passed, keyed as ``_checked_key`` says. A float argument enters by its type
# only: the check compares shapes and dtypes, and Adam's step size, a new float
# every step, would otherwise run the meta kernel on every step. A value the op
# itself refuses is still refused, by the functional op's own shape inference
# or by the compile.


def _checked_key(info, flat, tree):
    parts = []
    for a in flat:
        t = type(a)
        if t is LazyTensor:
            parts.append(a.spec.key)
        elif t is float:
            parts.append(float)
        elif t in _EXACT_CONSTS:
            parts.append((t, a))
        else:
            return None
    return (info, tree, tuple(parts))


def _mutating(func, args, kwargs):
    check_overlap(func, args, kwargs)
    check_source_dtype(func, args, kwargs)
    fn = _self_update(func)
    if fn is not _OTHER_WRITES:
        self = args[0]
        if not isinstance(self, LazyTensor):
            _host_written_by_lazy(func, self)
        if fn is None:
            return fallback.run_eagerly(func, args, kwargs)
        if self._view:  # (eager's refusals of overlapping views: views.check_write)
            check_write(self, func, args, kwargs)
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
                assign(self, _int64_state(out) if self.dtype is torch.int64 else out)
                return self
            out = wrap_value(out)
        if out.dtype != self.dtype:
            out = aten._to_copy.default(out, dtype=self.dtype)
        out = value_of(out)
        assign(self, _int64_state(out) if self.dtype is torch.int64 else out)
        return self
    written = _written_args(func)
    if not all(n.startswith("out") for n in written):
        return _mutating_args(func, written, args, kwargs)
    # out= variants: compute functionally, then copy into the outputs.
    outs = [kwargs[n] for n in written if n in kwargs]
    rest = {k: v for k, v in kwargs.items() if k not in written}
    if func.__name__.split(".")[0] in _REDUCED_IN_OUT_DTYPE and rest.get("dtype") is None:
        rest["dtype"] = outs[0].dtype
    # (the out= kernel's own checks first: a result its out= tensor cannot
    # hold, float into int, raises as in eager rather than being truncated)
    flat, tree = argtree.flatten(args, kwargs)
    shapes.infer(func, [shapes.Placeholder(a.spec) if isinstance(a, LazyTensor) else a
                        for a in flat], tree)
    result = func.overloadpacket(*args, **rest)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for o, r in zip(outs, results):
        if tuple(o.shape) != tuple(r.shape):
            raise RuntimeError(
                f"lazy-mlir: {func} would resize its out= tensor from {tuple(o.shape)} to "
                f"{tuple(r.shape)}; call the op without out= on lazy tensors")
        o.copy_(r)
    return outs[0] if len(outs) == 1 else tuple(outs)


# Reductions whose out= kernel, given no ``dtype``, computes in its out=
# tensor's (ATen's ``get_dtype_from_result``): ``sum(f32, 0, out=i64)``
# sums the truncated elements (fuzzer seed 802102: summed the floats, then
# truncated: 0 for -1, silently).
_REDUCED_IN_OUT_DTYPE = frozenset({"sum", "nansum", "prod", "mean", "cumsum", "cumprod"})


def _int64_state(v: Value) -> Value:
    """An int64 tensor's new value, kept in the band a target that holds
    int64 as int32 assumes (``bounds.int64_in_band``)."""
    return bounds.int64_in_band(v, emit) if narrows_int64(current_target().name) else v


def _mutating_args(func, written, args, kwargs):
    """Ops that write arguments other than ``self`` (batch norm's running
    statistics): record the functional variant, then write the new values."""
    names, _, returns = schema_facts(func)
    bound = dict(zip(names, args), **kwargs)
    targets = [bound.get(name) for name in written]
    if all(t is None for t in targets):  # nothing to write: a plain functional call
        return record(func, args, kwargs)
    variant = functional_variant(func)
    if variant is None or not all(isinstance(t, LazyTensor) for t in targets):
        return fallback.run_eagerly(func, args, kwargs)
    outs = record(variant, args, kwargs, bare=True)
    if type(outs) is list and all(type(o) is Value for o in outs):  # from its plan
        for t, new in zip(targets, outs[returns:]):
            assign(t, new)  # (the new statistics: no wrapper tensor made for them)
        outs = [wrap_value(v) for v in outs[:returns]]
    else:
        for t, new in zip(targets, outs[returns:]):
            assign(t, value_of(new))
    return tuple(outs[:returns]) if returns > 1 else outs[0]


def _sync_op(func, args, kwargs):
    """Ops that return Python values (``item``, ``equal``, ...): run on host."""
    if func._schema.is_mutable:  # (_amp_foreach_*_, _fused_adagrad_): to_host gives the
        # device data's own host tensor, which must not be written: copies, written back
        return _foreach.run_eagerly(func, args, kwargs, "it writes arguments and returns nothing")
    flat, tree = argtree.flatten(args, kwargs)  # (not torch's pytree: a step's item() pays it)
    folded = _dry_run[0] is None and _host_eval.values(flat, value_of)
    metrics.counter_inc(("folded::" if folded else "sync::") + func.__name__.split(".")[0])
    hargs, hkwargs = argtree.unflatten(folded or
        [to_host(a) if isinstance(a, LazyTensor) else a for a in flat], tree)
    return func(*hargs, **hkwargs)


# ------------------------------------------------------------ special ops
def _copy_(func, args, kwargs):
    dst, src = args[0], args[1]
    if not isinstance(dst, LazyTensor):  # into host memory (C++ callers: DDP's checks)
        dst.copy_(to_host(src))
        return dst
    if 0 in dst.shape and tuple(src.shape) == tuple(dst.shape) and _dry_run[0] is None:
        return dst  # nothing to write (``torch.tensor([], device="lazy")``'s copy)
    if dst._view:
        check_write(dst, func, args, kwargs)
    if isinstance(src, LazyTensor):
        if src._storage is dst._storage:
            check_overlap(func, args, kwargs)
        out = src
        if src.dtype != dst.dtype:
            out = aten._to_copy.default(src, dtype=dst.dtype)
        if tuple(out.shape) != tuple(dst.shape):
            out = aten.expand.default(out, list(dst.shape))
        layout = _layout_of(dst)
        if dst._view or tuple(out.shape) != tuple(dst.shape) or out is src or (
                layout is not None and out.stride() != dst.stride()):
            # (in dst's layout: a later view of dst is inferred on the value's
            # strides: AccumulateGrad copies a transposed gradient into a
            # contiguous .grad)
            out = aten.clone.default(out, memory_format=layout or torch.preserve_format)
        assign(dst, value_of(out))
    else:
        host = src.detach().to(dst.dtype).expand(dst.shape).contiguous().clone()
        assign(dst, data_value(host))
    return dst


def _layout_of(t):
    """The memory format ``t`` is dense in (contiguous, channels last), or None."""
    if t.is_contiguous():
        return torch.contiguous_format
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def _to_copy(func, args, kwargs):
    src = args[0]
    device = kwargs.get("device")
    if device is not None and torch.device(device).type != LAZY_TYPE:
        host = to_host(src)
        rest = {k: v for k, v in kwargs.items() if k != "device"}
        out = aten._to_copy.default(host, **rest)
        return out if out is not host else host.clone()
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
    return record(func, args, kwargs)


def _native_dropout(func, args, kwargs):
    """Dropout with its mask drawn inside the graph (see ``random``)."""
    x, p = args[0], args[1]
    train = args[2] if len(args) > 2 else kwargs.get("train")
    if not train or p == 0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    metrics.counter_inc("lazy::native_dropout")
    out, keep = random.dropout(emit, value_of(x), p)
    return wrap_value(out), wrap_value(keep)



def _native_batch_norm(func, args, kwargs):
    """Its schema says functional, but in training it updates the running
    statistics in place, as the CPU and CUDA kernels do."""
    bound = dict(zip(schema_facts(func)[0], args), **kwargs)
    if bound.get("training"):
        return _mutating_args(func, ["running_mean", "running_var"], args, kwargs)
    if func is aten._native_batch_norm_legit.default:
        out = _mutating_args(func, ["running_mean", "running_var"], args, kwargs)
    else:
        out = record(func, args, kwargs)
    return _no_saved_stats(out)


def _roll(func, args, kwargs):
    """``roll`` by a runtime shift where offsets are lifted (``offsets.roll``)."""
    out = offsets.roll(*args, **kwargs)
    return record(func, args, kwargs) if out is None else out


def _no_saved_stats(out):
    """Batch norm in eval mode saves no statistics: the CPU kernels return
    them empty, although the meta kernels (and so the graph) say [C]."""
    empty = [torch.empty(0, dtype=o.dtype, device=o.device) for o in out[1:3]]
    return (out[0], *empty, *out[3:])


_SPECIAL = {aten.copy_.default: _copy_, aten._to_copy.default: _to_copy,
            aten.native_dropout.default: _native_dropout,
            aten.native_batch_norm.default: _native_batch_norm,
            aten._native_batch_norm_legit.default: _native_batch_norm,
            aten._native_batch_norm_legit_no_training.default: _native_batch_norm,
            aten.roll.default: _roll}
_SPECIAL.update({f: random.fill for f in _RANDOM})
_SPECIAL.update(RESIZE)
_SPECIAL.update(_fused_optim.SPECIAL)
_SPECIAL.update(_packed.SPECIAL)
_SPECIAL.update(_multinomial.SPECIAL)
if _SPECIAL.keys() != SPECIAL_OPS:  # kinds.kind routes these ops here: the two must agree
    raise ImportError(f"lazy-mlir: kinds.SPECIAL_OPS and dispatch._SPECIAL differ: "
                      f"{set(_SPECIAL) ^ SPECIAL_OPS}")
