"""Foreach ops (``torch._foreach_*``) on lazy tensors.

Optimizers with ``foreach=True`` (the default on the lazy device:
``prefer_foreach``), ``clip_grad_norm_(foreach=True)`` and direct
``torch._foreach_*`` calls apply one op to every tensor of a list. Two ways
to record one (the mapping to per-tensor ops is ``ops/foreach.py``'s):

- whole (``_record_whole``): the functional foreach op becomes ONE graph node
  with an output per element, decomposed into its per-tensor ops before
  import; an in-place one then writes each output into its element. An
  optimizer's update costs a dozen recorded ops a step instead of a dozen
  per parameter. Taken when every list element is a lazy tensor of one
  dtype, an in-place op's elements share no storage with each other or with
  its other arguments, and every number that could change between steps
  (a learning rate) becomes a graph input: the ``.Scalar`` overloads of
  add/mul/div are recorded as their ``.Tensor`` overloads with the number
  lifted to a 0-dim tensor, as ``scalars.lift_scalars`` does per op; the
  hyperparameters in ``_CONSTANT_ARGS`` stay constants of the node.
- per element, otherwise: ``_foreach_X(lists...)`` returns
  ``[X(a_i, b_i, ...)]`` and ``_foreach_X_(lists...)`` calls
  ``X_(a_i, b_i, ...)`` for i in order, so each write goes through capture's
  in-place path (views and aliases see it, and a later element sees an
  earlier element's write, as in eager).

Ops with no per-tensor op (``_foreach_powsum``, ``out=`` overloads), and
per-element scalars given as a lazy tensor, run eagerly on host copies:
counted as ``aten::<op>`` fallbacks and written back into the lazy tensors,
never silently.
"""
from __future__ import annotations

from operator import is_

import torch

from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import metrics
from ..graph import argtree
from ..config import current_config
from ..graph.ir import Value
from ..ops import support as _support
from ..ops.foreach import PREFIX, element_calls, length as _length, plan, whole_node_ops
from . import list_replay
from .capture import _make_scalar, assign, assign_each, data_value, op_info, value_of
from .kinds import functional_of
from .scalars import _scalar_dtype
from .state import dry_run as _dry_run
from .supported import note_fallback
from .sync import execute, to_host
from .tensor import LazyTensor, wrap_value

aten = torch.ops.aten
__all__ = ["PREFIX", "plan", "dispatch", "run_eagerly", "prefer_foreach"]

# ``dispatch.record`` (installed by dispatch.py, which imports this module).
_record = None

_NUMBERS = (int, float)
# .Scalar overloads recorded as their .Tensor overload, the number lifted.
_TENSOR_SIBLING = {"add", "mul", "div"}
# Numbers that stay constants of a whole node: hyperparameters torch.optim
# passes as they are (Adam's 1 - beta1, 1 - beta2, beta ** step), which do
# not change between steps. Any other number that could (a learning rate as
# ``alpha``, per-element step sizes) sends the op down the per-element path.
_CONSTANT_ARGS = {("pow", "self")}
# Numbers that may change between steps (a scheduler's beta1 in Adam's
# ``lerp``, RMSprop's ``addcdiv`` by -lr) but have no ``.Tensor`` sibling: the
# op is recorded as whole nodes of its list siblings with the number lifted
# (``_record_lifted``); they were constants of the node, and each new value
# compiled a new graph, every step under a scheduler.
_LIFTED_ARGS = {("lerp", "weight"), ("addcmul", "value"), ("addcdiv", "value")}
_WHOLE = None  # the functional overloads decomposed before import (ops/foreach.py)
_NO = object()


def dispatch(func, args, kwargs):
    """Record a foreach op on lazy tensors: whole when it can, else as its
    per-tensor ops."""
    first = args[0] if args else None
    if type(first) is list and first:  # (a repeated in-place call: list_replay.py)
        r = list_replay.find(func, first[0])
        if r is not None and _replayed(r, args, kwargs):
            return None
    how = plan(func)
    name = func.__name__.split(".")[0]
    if isinstance(how, str):
        return run_eagerly(func, args, kwargs, how)
    bound = how.bind(args, kwargs)
    n = _length(func, how, bound)
    if not how.tensor_scalars and _record is not None:
        out = _record_whole(func, how, bound, n, (args, kwargs))
        if out is not _NO:  # (counted by record, as lazy::<the functional op>)
            return out
    for s in how.tensor_scalars:
        if isinstance(bound[s], LazyTensor):  # its values are needed on the host
            return run_eagerly(func, args, kwargs, "per-element scalars in a lazy tensor")
        bound[s] = _scalar_list(bound[s], n)
    metrics.counter_inc("lazy::" + name)
    results = []
    for pos, kw in element_calls(how, bound, n):
        out = how.op(*pos, **kw)
        if how.via_copy:
            aten.copy_(pos[0], out)
        results.append(out)
    return None if how.inplace else results


def _whole_op(func, how):
    """The functional overload to record ``func`` as, or None."""
    global _WHOLE
    try:
        return func._lazy_mlir_whole
    except AttributeError:
        pass
    if _WHOLE is None:
        _WHOLE = frozenset(whole_node_ops())
    fn = functional_of(func) if how.inplace else func
    fn = fn if fn in _WHOLE else None
    try:
        func._lazy_mlir_whole = fn
    except (AttributeError, TypeError):
        pass
    return fn


def _record_whole(func, how, bound, n, call):
    """Record ``func`` as one node (see the module docstring); ``_NO`` when
    it must go per element. ``call``: its (args, kwargs)."""
    fn = _whole_op(func, how)
    if (fn is None or not _support.op_is_supported(fn) or not current_config().decompositions
            or _support.DENIED_SIGNATURES.get(_support.mlir_name(fn))):
        return _NO
    names = how.names
    first = next(a for a in names if a in how.lists)  # (pow.ScalarAndTensor: "exponent")
    selves = bound[first]
    if type(selves[0]) is not LazyTensor:
        return _NO
    dtype = selves[0].dtype  # (dtypes are singletons: compared by identity)
    for t in selves:
        if type(t) is not LazyTensor or t.dtype is not dtype:
            return _NO
    own = {id(t._storage) for t in selves} if how.inplace else ()
    if how.inplace and len(own) != n:
        return _NO
    args, lifted = [], None
    for arg in names:
        v = bound[arg]
        tv = type(v)
        if arg in how.lists and arg != first:
            for t in v:
                if type(t) is LazyTensor:
                    if how.inplace and id(t._storage) in own:
                        return _NO
                elif type(t) in _NUMBERS:
                    if t not in (0, 1):
                        return _NO  # per-element step sizes
                else:
                    return _NO
        elif type(v) is LazyTensor:
            if how.inplace and id(v._storage) in own:
                return _NO
        elif tv in _NUMBERS and v not in (0, 1):
            if how.base in _TENSOR_SIBLING and fn._overloadname == "Scalar":
                fn = getattr(aten, PREFIX + how.base).Tensor
                v = _make_scalar(v, _scalar_dtype(dtype, selves[0].dim() == 0, tv))
            elif (how.base, arg) in _LIFTED_ARGS:
                lifted = _make_scalar(v, _scalar_dtype(dtype, selves[0].dim() == 0, tv))
            elif (how.base, arg) not in _CONSTANT_ARGS:
                return _NO
        args.append(v)
    if lifted is not None:
        return _record_lifted(how, [bound[a] for a in names if a in how.lists], lifted)
    kw = {}
    for arg in how.kwarg_only:  # (alpha: a liftable one went per element above)
        kw[arg] = args[names.index(arg)]
    pos = [a for arg, a in zip(names, args) if arg not in how.kwarg_only]
    if not how.inplace:
        return list(_record(fn, tuple(pos), kw))
    # bare: Values when recorded from its plan (no wrapper tensor per element)
    outs = _record(fn, tuple(pos), kw, bare=True)
    if type(outs) is list and all(type(o) is Value and o.spec.dtype == dtype for o in outs):
        _keep(func, how, bound, call, selves, outs, dtype)  # (reads the inputs: before the writes)
        assign_each(selves, outs)  # the common case: no cast
        return None
    for t, o in zip(selves, outs):
        if type(o) is Value:
            if o.spec.dtype == t.dtype:
                assign(t, o)
                continue
            o = wrap_value(o)
        if o.dtype != t.dtype:
            o = aten._to_copy.default(o, dtype=t.dtype)
        assign(t, value_of(o))
    return None


def _record_lifted(how, lists: list, number: LazyTensor):
    """``lerp(self, end, w)``, ``addcdiv(self, t1, t2, value)`` or ``addcmul``
    as whole nodes of list ops with the number a 0-dim input, computed as
    eager's kernels do: ``lerp.List`` with the weight per element, ``self +
    (value * t1) / t2`` (``* t2``); an in-place op's results written into
    its elements."""
    selves = lists[0]
    if how.base == "lerp":
        outs = _record(aten._foreach_lerp.List, (selves, lists[1], [number] * len(selves)), {})
    else:
        scaled = _record(aten._foreach_mul.Tensor, (lists[1], number), {})
        by = aten._foreach_div.List if how.base == "addcdiv" else aten._foreach_mul.List
        outs = _record(aten._foreach_add.List, (selves, _record(by, (scaled, lists[2]), {})), {})
    if not how.inplace:
        return list(outs)
    for t, o in zip(selves, outs):
        assign(t, value_of(o if o.dtype == t.dtype else aten._to_copy.default(o, dtype=t.dtype)))
    return None


def _keep(func, how, bound, call, selves, outs, dtype) -> None:
    """Keep an in-place whole op's record for its next call
    (``list_replay``), when the call passes its lists first, in the schema's
    order, then constants only: ``_replayed`` finds the tensors there."""
    leaves, call_tree = argtree.flatten(*call)
    tensors = [t for arg in how.names if arg in how.lists for t in bound[arg]]
    n = len(tensors)
    if (len(leaves) < n or not all(map(is_, leaves[:n], tensors))
            or any(isinstance(a, torch.Tensor) for a in leaves[n:])):
        return
    before = list_replay.values(tensors)
    if before is not None:
        list_replay.keep(func, selves[0], call_tree, leaves[n:], before, outs,
                         op_info(outs[0].node.op).counter, (len(selves), dtype))


def _replayed(r, args, kwargs) -> bool:
    """Record an in-place whole op from its last record (``list_replay``)
    when the same facts hold: True when done."""
    leaves, call_tree = argtree.flatten(args, kwargs)
    n = len(r.specs)
    n_self, dtype = r.extra
    tensors = leaves[:n]
    vals = list_replay.values(tensors)
    if vals is None:
        return False
    selves = tensors[:n_self]
    own = set(map(id, map(list_replay.storage_of, selves)))
    if (len(own) != n_self or set(map(list_replay.dtype_of, selves)) != {dtype}
            or not own.isdisjoint(map(id, map(list_replay.storage_of, tensors[n_self:])))):
        return False
    outs = list_replay.replay(r, call_tree, vals, leaves[n:])
    if outs is None:
        return False
    assign_each(selves, outs)
    return True


def prefer_foreach() -> bool:
    """Make torch.optim's default (``foreach=None``) take its foreach path
    for lazy parameters, as it does on CUDA: there its update is a dozen
    foreach ops, each recorded as one node (``_record_whole``), instead of a
    dozen ops per parameter. torch.optim decides with
    ``_default_to_fused_or_foreach``, from the device types of
    ``_get_foreach_kernels_supported_devices()`` and the tensor types of
    ``_foreach_supported_types``; lazy tensors are added to both, in
    ``torch.optim.optimizer`` only. Returns whether it applied."""
    import torch.optim.optimizer as opt_mod
    types = getattr(opt_mod, "_foreach_supported_types", None)
    if not isinstance(types, list) or not add_lazy_device("_get_foreach_kernels_supported_devices"):
        return False
    if LazyTensor not in types:
        types.append(LazyTensor)
    return True


def add_lazy_device(lister: str) -> bool:
    """Make ``<lister>`` (a function listing the device types a foreach or
    fused path supports) list ``lazy`` too, where torch.optim reads it
    (``torch.optim.optimizer``) and where ``torch.nn.utils``' gradient
    clipping reads it (``torch.utils._foreach_utils``: ``clip_grad_norm_(...,
    foreach=True)`` raised "can't use the foreach API on lazy tensors");
    False when this torch has no such function. Applied once however often
    called."""
    import torch.optim.optimizer as opt_mod
    import torch.utils._foreach_utils as foreach_utils
    found = False
    for module in (opt_mod, foreach_utils):
        original = getattr(module, lister, None)
        if original is None:
            continue
        found = True
        setattr(module, lister, _listing_lazy(getattr(original, "__wrapped__", original)))
    return found


def _listing_lazy(original):
    def supported_devices(*args, **kwargs) -> list[str]:
        devices = original(*args, **kwargs)
        return devices if "lazy" in devices else [*devices, "lazy"]

    supported_devices.__wrapped__ = original
    return supported_devices


def _scalar_list(t: torch.Tensor, n: int) -> list:
    """A host tensor of per-element scalars as Python numbers (PyTorch's
    ``convert_tensor_to_scalar_list``: 1-D with one value per list element)."""
    if t.dim() != 1 or t.numel() != n:
        raise RuntimeError(f"Expected scalars to be a 1-D tensor of size {n}, got {tuple(t.shape)}")
    return t.tolist()


def run_eagerly(func, args, kwargs, why: str):
    """Run ``func`` on host copies of its lazy arguments, then write every
    argument it writes back into the lazy tensors, list elements included
    (``fallback.run_eagerly`` writes only top-level tensor arguments). For
    foreach ops without a per-tensor mapping, and for capture's other ops
    that return nothing but write their arguments
    (``_amp_foreach_non_finite_check_and_unscale_``, ``_fused_adagrad_``; a
    fused Adam/SGD update that cannot be one node: ``fused_optim.py``)."""
    if _dry_run[0] is not None:  # lm.check_coverage: record it, run nothing
        return _dry_run[0].stand_in(func, args, kwargs, why)
    note_fallback(func.__name__.split(".")[0], why)
    flat, tree = tree_flatten((args, kwargs))
    # Every pending argument in one graph: read one by one, each read would
    # launch its own (GradScaler's unscale of N gradients: N compiles).
    execute([value_of(a) for a in flat if isinstance(a, LazyTensor)])
    host = [to_host(a).clone() if isinstance(a, LazyTensor) else a for a in flat]
    hargs, hkwargs = tree_unflatten(host, tree)
    out = func(*hargs, **hkwargs)
    names = [a.name for a in func._schema.arguments]
    bound_lazy = dict(zip(names, args), **kwargs)
    bound_host = dict(zip(names, hargs), **hkwargs)
    for a in func._schema.arguments:
        if a.alias_info and a.alias_info.is_write:
            lazy_v, host_v = bound_lazy.get(a.name), bound_host.get(a.name)
            pairs = zip(lazy_v, host_v) if isinstance(lazy_v, (list, tuple)) else [(lazy_v, host_v)]
            for lz, h in pairs:
                if isinstance(lz, LazyTensor):
                    assign(lz, data_value(h))
    if out is None:
        return None
    leaves, out_tree = tree_flatten(out)
    return tree_unflatten([wrap_value(data_value(o)) if isinstance(o, torch.Tensor) else o
                           for o in leaves], out_tree)
