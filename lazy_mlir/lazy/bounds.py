"""Index bounds checks: an out-of-range index raises, never reads or writes
outside a tensor. (Integer division by zero is checked the same way: ``DIVISIONS``.)

Eager PyTorch checks every index of ``x[i]``, ``gather``, ``scatter``,
``embedding``, ... and raises. A compiled kernel does not: torch-mlir's
lowerings use index values as offsets, so an out-of-range index read garbage
or wrote over other memory. For each recorded op that takes index tensors
(``CHECKS`` below) capture does two things:

- **memory safety**: the op is recorded with its indices clamped into the
  range the op accepts (``[-n, n)`` where negatives count from the end,
  ``[0, n)`` where they are invalid), so the compiled kernel never leaves the
  tensor whatever the values are;
- **the error**: an index whose values are on the host (a CPU index tensor,
  data uploaded with ``.to('lazy')``, a value already read back) is checked at
  once and raises what eager raises, at the line that called the op
  (``host_index.py``). Any
  other index gets a bool flag computed in the same graph
  (``any(clamped != i)``, one fused reduction). Pending flags wait
  here; the next graph that computes their index (or reads it as data) also
  computes them, stacked into one extra output, and the worker reads that
  one small vector after the run (``raise_if_flagged``): a set flag makes
  the graph fail with the op's eager exception type (IndexError or
  RuntimeError), naming the op, the valid range and the line that captured
  it. Every tensor that graph computed then raises it when read, and the
  next sync point (``mark_step``, ``.cpu()``, ``.item()``) raises it once.

Not checked: bool masks (they select, they do not index), ``_unsafe_index``
(made by decompositions with indices in range by construction), and graphs
traced by ``lm.jit`` or exported (``unchecked``): their indices are clamped,
so they stay memory-safe, but an out-of-range index gives a clamped result.
"""
from __future__ import annotations

import contextlib
import math
import weakref

import torch

from ..graph import argtree
from ..graph.ir import Value
from ..ops.mask_index import count_dim, lone_index
from .state import bounds_mode as _state, dry_run as _dry_run
from .state import index_checks as _pending
from .state import index_guards as _guards
from .host_index import _host_check, _host_of, _location
from .tensor import wrap_value

aten = torch.ops.aten


class Check:
    """One pending in-graph check: ``flag`` (0-d bool, true when some index
    is out of range) is computed from ``index``. ``message`` is built only
    when read (a sync point takes it for the worker): recording keeps its
    parts, of which only the location must be taken at once."""

    __slots__ = ("flag", "index", "exc", "_message", "_parts")

    def __init__(self, flag: Value, index: Value, exc: type, message: str | None,
                 parts: tuple | None = None):
        self.flag = flag
        self.index = index
        self.exc = exc
        self._message = message
        self._parts = parts  # (func, n, lo, d, location): an index check's message

    @property
    def message(self) -> str:
        if self._message is None:
            func, n, lo, d, where = self._parts
            self._message = (f"index out of range in {_describe(func, n, lo, d)}, "
                             f"captured at {where}")
        return self._message


# ``_pending`` (the Checks waiting for a graph) and ``_state`` (the depths of
# the context managers below) live in state.py.


@contextlib.contextmanager
def unchecked():
    """Record indexing ops clamped but without flags (``lm.jit``, export:
    their graphs are compiled for later calls, not run at the next sync)."""
    _state["unchecked"] += 1
    try:
        yield
    finally:
        _state["unchecked"] -= 1


@contextlib.contextmanager
def in_graph():
    """Check lazy indices and divisors by in-graph flags even when their
    values are on the host (``compile_train_step``: the graph is replayed on
    other batches, whose targets nobody checks at capture)."""
    _state["in_graph"] += 1
    try:
        yield
    finally:
        _state["in_graph"] -= 1


# ------------------------------------------------------------- the op table
# Each entry: op -> (where its indices are, exception type eager raises, the
# eager message format). ``where(args)`` gets the op's bound arguments
# (name -> Value / spec-carrying object / constant) and yields
# (argument name, position in a list or None, size n, negatives allowed,
# ignored value or None, dimension).
def _spec(a):
    return a.spec if isinstance(a, Value) else a


def _shape(a) -> tuple:
    return tuple(a.spec.shape) if isinstance(a, Value) else tuple(a.shape)


def _dim_size(self, dim) -> tuple[int, int]:
    shape = _shape(self)
    if not shape:
        return 0, 1
    d = dim % len(shape)
    return d, shape[d]


def _is_int_index(i) -> bool:
    if i is None:
        return False
    dtype = i.spec.dtype if isinstance(i, Value) else getattr(i, "dtype", None)
    return dtype in (torch.int64, torch.int32, torch.int16, torch.int8)


def _advanced(b):
    """``x[i, j]``, ``index_put``: each index takes the next dim; a bool
    mask takes as many dims as it has and is not checked."""
    shape = _shape(b["self"])
    d = 0
    for k, i in enumerate(b["indices"]):
        if i is None:
            d += 1
        elif _is_int_index(i):
            if d < len(shape):
                yield "indices", k, shape[d], True, None, d
            d += 1
        else:
            d += len(_shape(i))


def _along_dim(negatives: bool):
    def where(b):
        d, n = _dim_size(b["self"], b["dim"])
        yield "index", None, n, negatives, None, d
    return where


def _flat(b):
    yield "index", None, math.prod(_shape(b["self"])), True, None, 0


def _embedding(b):
    yield "indices", None, _shape(b["weight"])[0], False, None, 0


def _embedding_backward(b):
    yield "indices", None, b["num_weights"], False, None, 0


def _nll(b):
    shape = _shape(b["self"])
    d = 1 if len(shape) >= 2 else 0
    yield "target", None, shape[d], False, b["ignore_index"], d


def _unpool(b):
    yield "indices", None, math.prod(b["output_size"]), False, None, 0


_EAGER_INDEX = "index {v} is out of bounds for dimension {d} with size {n}"
_IN_SELF = "index out of range in self"
_TAKE = "out of range: tried to access index {v} on a tensor of {n} elements."
_TARGET = "Target {v} is out of bounds."
_UNPOOL = "Found an invalid max index: {v} (output volumes are of size {n})"

CHECKS: dict = {}


def _add(ops, where, exc, fmt):
    for name in ops:
        packet, _, overload = name.partition(".")
        p = getattr(aten, packet, None)
        if p is not None and (overload or "default") in p.overloads():
            CHECKS[getattr(p, overload or "default")] = (where, exc, fmt)


_add(["index.Tensor", "index.Tensor_hacked_twin", "index_put.default",
      "index_put.hacked_twin", "_index_put_impl.default"], _advanced, IndexError, _EAGER_INDEX)
_add(["index_select.default", "index_add.default", "index_reduce.default"],
     _along_dim(False), IndexError, _IN_SELF)
_add(["index_copy.default"], _along_dim(False), IndexError, "index_copy_(): " + _EAGER_INDEX)
_add(["index_fill.int_Scalar", "index_fill.int_Tensor"], _along_dim(True), IndexError,
     _EAGER_INDEX)
_add(["gather.default", "scatter.src", "scatter.value", "scatter.reduce", "scatter.value_reduce",
      "scatter_add.default", "scatter_reduce.two"], _along_dim(False), RuntimeError,
     _EAGER_INDEX)
_add(["take.default", "put.default"], _flat, IndexError, _TAKE)
_add(["embedding.default"], _embedding, IndexError, _IN_SELF)
# Eager's CPU kernel does not check (its forward did); we raise rather than
# compute a gradient from clamped rows.
_add(["embedding_dense_backward.default"], _embedding_backward, IndexError, _IN_SELF)
_add(["nll_loss_forward.default", "nll_loss2d_forward.default", "nll_loss_backward.default",
      "nll_loss2d_backward.default"], _nll, IndexError, _TARGET)
_add(["max_unpool2d.default", "max_unpool3d.default"], _unpool, RuntimeError, _UNPOOL)


# Integer division by zero: eager raises RuntimeError("ZeroDivisionError")
# for an integer div with a rounding mode, floor_divide, remainder or fmod by
# zero; a compiled kernel gave some value. The divisor is checked as an index
# is: on the host at once, else by a flag; the kernel divides by 1 instead.
DIVISIONS: dict = {}  # op -> its rounding-mode argument (None: always integer division)
for _name, _mode in [("div.Tensor_mode", "rounding_mode"), ("div.Scalar_mode", "rounding_mode"),
                     ("floor_divide.default", None), ("floor_divide.Scalar", None),
                     ("remainder.Tensor", None), ("remainder.Scalar", None),
                     ("remainder.Scalar_Tensor", None), ("fmod.Tensor", None),
                     ("fmod.Scalar", None)]:
    _packet, _, _overload = _name.partition(".")
    if _overload in getattr(aten, _packet).overloads():
        DIVISIONS[getattr(getattr(aten, _packet), _overload)] = _mode


def checked(func) -> bool:
    return func in CHECKS or func in DIVISIONS


# ------------------------------------------------------------------- guard
_schemas: dict = {}  # op -> (argument names, defaults): reading _schema builds new objects


def _names(func):
    got = _schemas.get(func)
    if got is None:
        arguments = func._schema.arguments
        got = _schemas[func] = ([a.name for a in arguments],
                                {a.name: a.default_value for a in arguments
                                 if a.has_default_value()})
    return got


def _bind(func, args, kwargs) -> dict:
    names, defaults = _names(func)
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    return bound


def _describe(func, n, lo, d) -> str:
    name = str(func).replace(".default", "")
    return f"{name}: an index is outside [{lo}, {n}) (dimension {d} with size {n})"


def _flag(node, safe: Value, iv: Value, exc, func, n, lo, d, kept=None) -> bool:
    """Register the in-graph check of ``iv`` (clamped into ``safe``)."""
    if _state["unchecked"] == 0 and _dry_run[0] is None:  # a dry run runs no graph
        # Clamping changed an index exactly where it was out of range.
        flag = node(aten.any.default, [node(aten.ne.Tensor, [safe, iv], kept, 3)[0]], kept, 4)[0]
        _pending.append(Check(flag, iv, exc, None, (func, n, lo, d, _location())))
        return True
    return False


# A training step guards the same computed index twice: in the forward op and
# its backward (``embedding`` / ``embedding_dense_backward`` on GPT-2's
# position ids, ``nll_loss_forward`` / ``_backward`` on the shifted labels),
# both reading the very same Value. Its flag, already pending or computed,
# says everything the second would (the same values against the same range):
# the second op reads the first's clamped index and registers nothing.
# Only between two graph cuts: every graph cut (``take_flag``) forgets them, so a
# graph never leans on a check made for another (``compile_train_step``
# replays its graph's own checks on other batches).
# (``_guards``: id(index) -> (weakref, range, clamped).)
def _clamped_once(node, iv: Value, lo, n, ignore, exc, func, d, kept=None) -> Value:
    rng = (lo, n, ignore)
    done = _guards.get(id(iv))
    if done is not None and done[0]() is iv and done[1] == rng and not _state["unchecked"] \
            and _dry_run[0] is None:
        return done[2]
    safe = _clamped(node, iv, lo, n, ignore, kept)
    if _flag(node, safe, iv, exc, func, n, lo, d, kept):
        i = id(iv)
        _guards[i] = (weakref.ref(iv, lambda _, i=i: _guards.pop(i, None)), rng, safe)
    return safe


def guard(func, args: tuple, kwargs: dict, emit, value_of=None):
    """``(args, kwargs)`` of ``func`` with every index argument clamped into
    range (Values in, Values out; with ``value_of``, lazy tensors in and out),
    after checking host indices now and registering a flag for the others.
    Raises the op's eager exception for an out-of-range host index."""
    outer = _state["outer"]
    if outer is not None and outer is not func:
        return args, kwargs  # inside a checked op's decomposition: checked already
    if func in DIVISIONS:
        return _guard_divisor(func, args, kwargs, emit, value_of)
    where_fn, exc, fmt = CHECKS[func]
    bound = _bind(func, args, kwargs)
    if func in _MASK_WRITES:
        _check_mask_count(bound, emit, value_of)
    replaced: dict = {}
    for name, pos, n, negatives, ignore, d in list(where_fn(bound)):
        i = bound[name] if pos is None else bound[name][pos]
        if isinstance(i, torch.Tensor) and value_of is not None and i.device.type == "lazy":
            iv = value_of(i)
        else:
            iv = i
        if not isinstance(iv, (Value, torch.Tensor)) or 0 in _shape(iv):
            continue
        lo = -n if negatives else 0
        if n == 0:  # nothing is in range: no values needed
            raise exc(f"lazy-mlir: index out of range in {_describe(func, n, lo, d)}, "
                      f"captured at {_location()}")
        if _host_check(func, iv, n, lo, ignore, d, exc, fmt) or not isinstance(iv, Value):
            continue
        replaced[(name, pos)] = _clamped_once(_via(emit), iv, lo, n, ignore, exc, func, d)
    if not replaced:
        return args, kwargs
    return _rebuild(func, args, kwargs, replaced, value_of)


# ``x[mask] = values`` with one value per selected element (the backward of
# ``w[mask]``): eager raises when the mask selects another number of
# elements than there are values; the compiled write gathers them by rank
# (ops/index.py), so the count is checked as an index is.
_MASK_WRITES = {op for op in CHECKS if op.__name__.split(".")[0] in ("index_put",
                                                                      "_index_put_impl")}


def _counted_mask(bound):
    """(mask, number of values) of a write through one bool mask whose values
    come one per selected element, else None (as ``ops/index._masked_write``)."""
    found = lone_index(list(bound["indices"]))
    if found is None:
        return None
    p, mask = found
    dtype = mask.spec.dtype if isinstance(mask, Value) else getattr(mask, "dtype", None)
    if dtype not in (torch.bool, torch.uint8):
        return None
    vshape = _shape(bound["values"])
    at = count_dim(len(_shape(bound["self"])), p, len(_shape(mask)), vshape)
    if at is None or vshape[at] == 1:
        return None
    return mask, vshape[at]


def _check_mask_count(bound, emit, value_of) -> None:
    counted = _counted_mask(bound)
    if counted is None:
        return
    mask, n = counted
    if isinstance(mask, torch.Tensor) and value_of is not None and mask.device.type == "lazy":
        mask = value_of(mask)
    message = (f"shape mismatch: value tensor of shape {list(_shape(bound['values']))} cannot "
               f"be broadcast to indexing result of {{}} selected elements (index_put through "
               f"a bool mask), captured at {_location()}")
    host = mask if not isinstance(mask, Value) else (
        None if _state["in_graph"] else _host_of(mask))
    if host is not None:  # on the host: checked now
        count = int(torch.count_nonzero(host))
        if count != n:
            raise RuntimeError("lazy-mlir: " + message.format(count))
        return
    if _state["unchecked"] or _dry_run[0] is not None:
        return
    count = emit(aten.count_nonzero.default, (mask,), {})[0]
    flag = emit(aten.ne.Scalar, (count, n), {})[0]
    _pending.append(Check(flag, mask, RuntimeError, message.format("another number of")))


def guard_planned(func, vals: list, tree: tuple, emit, plan, emit_kept) -> list:
    """``guard`` on a recorded op's flat arguments (Values and constants;
    returns them, the index Values replaced), with where its indices are
    and their ranges (``_entries``) kept on the op's record plan
    (``plan.guard``), and the record plans of the clamp and flag ops too
    (their inputs' specs follow from the op's): no schema binding, no
    argument tree rebuilt, no op of the guard keyed again."""
    outer = _state["outer"]
    if outer is not None and outer is not func:
        return vals
    entries = plan.guard
    if entries is None:
        entries = plan.guard = _entries(func, vals, tree)
    if entries is False:
        args, kwargs = argtree.unflatten(vals, tree)
        return argtree.flatten(*guard(func, args, kwargs, emit))[0]
    out = vals
    for k, n, lo, ignore, d, exc, fmt, kept in entries:
        iv = vals[k]
        if _host_check(func, iv, n, lo, ignore, d, exc, fmt):
            continue
        safe = _clamped_once(emit_kept, iv, lo, n, ignore, exc, func, d, kept)
        if out is vals:
            out = list(vals)
        out[k] = safe
    return out


def _entries(func, vals: list, tree: tuple):
    """(flat position, n, lo, ignore, dim, exception, format, the guard's
    kept op plans) per index argument ``guard`` checks; they follow from what
    a record plan is keyed by (the op, the argument tree, input specs and
    constants). False where
    ``guard`` itself must run: a division, an empty range (it raises), an
    index Value standing at two places."""
    if func in DIVISIONS:
        return False
    where_fn, exc, fmt = CHECKS[func]
    bound = _bind(func, *argtree.unflatten(vals, tree))
    if func in _MASK_WRITES and _counted_mask(bound) is not None:
        return False
    entries = []
    for name, pos, n, negatives, ignore, d in list(where_fn(bound)):
        i = bound[name] if pos is None else bound[name][pos]
        if type(i) is not Value:
            if isinstance(i, torch.Tensor):
                return False
            continue
        if 0 in i.spec.shape:
            continue
        at = [k for k, v in enumerate(vals) if v is i]
        if n == 0 or len(at) != 1:
            return False
        entries.append((at[0], n, -n if negatives else 0, ignore, d, exc, fmt, [None] * 5))
    return entries


def _integral(a) -> bool:
    if isinstance(a, (Value, torch.Tensor)):
        dtype = a.spec.dtype if isinstance(a, Value) else a.dtype
        return dtype in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
    return type(a) is int


def _guard_divisor(func, args, kwargs, emit, value_of):
    """An integer division's divisor: a host zero raises now, as eager does;
    a computed one is flagged and replaced by 1 in the kernel."""
    if args and not _integral(args[0]):  # a float dividend (the common case): nothing to do
        return args, kwargs
    bound = _bind(func, args, kwargs)
    mode = DIVISIONS[func]
    d = bound["other"]
    if (mode is not None and bound.get(mode) is None) or not _integral(bound["self"]) \
            or not _integral(d):
        return args, kwargs  # true division or a float result: no error in eager
    if isinstance(d, torch.Tensor) and value_of is not None and d.device.type == "lazy":
        d = value_of(d)
    name = str(func).replace(".default", "")
    if isinstance(d, int) or (not isinstance(d, Value) and isinstance(d, torch.Tensor)):
        host = d
    elif isinstance(d, Value) and 0 not in d.spec.shape:
        host = _host_of(d)
    else:
        return args, kwargs
    if host is not None:
        if (host == 0) if isinstance(host, int) else bool((host == 0).any()):
            raise RuntimeError(f"ZeroDivisionError (lazy-mlir: {name} by an integer 0, "
                               f"captured at {_location()})")
        return args, kwargs
    zero = emit(aten.eq.Scalar, (d, 0), {})[0]
    if _state["unchecked"] == 0 and _dry_run[0] is None:
        flag = emit(aten.any.default, (zero,), {})[0]
        _pending.append(Check(flag, d, RuntimeError, f"ZeroDivisionError: {name} by an "
                              f"integer 0, captured at {_location()}"))
    safe = emit(aten.where.ScalarSelf, (zero, 1, d), {})[0]
    return _rebuild(func, args, kwargs, {("other", None): safe}, value_of)


def _clamped(node, i: Value, lo: int, n: int, ignore, kept=None) -> Value:
    """``i`` clamped into [lo, n), ``ignore`` kept as it was. ``node(func,
    flat, kept, slot)`` records an op (``_via(emit)``, or capture's
    ``emit_kept``, which keeps each op's record plan in ``kept[slot]``)."""
    safe = node(aten.clamp.default, [i, lo, n - 1], kept, 0)[0]
    if ignore is not None and not lo <= ignore < n:  # keep the ignored value as it was
        keep = node(aten.eq.Scalar, [i, ignore], kept, 1)[0]
        safe = node(aten.where.self, [keep, i, safe], kept, 2)[0]
    return safe


def _via(emit):
    """``emit`` as ``_clamped``/``_flag`` call it (every argument positional)."""
    return lambda func, flat, kept, slot: emit(func, tuple(flat), {})


def _rebuild(func, args, kwargs, replaced, value_of):
    names = _names(func)[0]
    args = list(args)
    kwargs = dict(kwargs)
    for (name, pos), safe in replaced.items():
        new = wrap_value(safe) if value_of is not None else safe
        if name in kwargs:
            container, key = kwargs, name
        else:
            container, key = args, names.index(name)
        if pos is None:
            container[key] = new
        else:
            lst = list(container[key])
            lst[pos] = new
            container[key] = type(container[key])(lst) if isinstance(container[key], tuple) \
                else lst
    return tuple(args), kwargs


def takes_integer_tensors(vals: list) -> bool:
    """Whether an op's flat arguments hold an integer tensor (possibly user
    indices). The decomposition of an op without one (sort, pooling,
    grid_sample, ...) makes its indices itself, in range by construction:
    its index ops are recorded as they are, unchecked (``within``)."""
    return any(isinstance(v, Value) and not v.spec.dtype.is_floating_point
               and not v.spec.dtype.is_complex and v.spec.dtype is not torch.bool for v in vals)


@contextlib.contextmanager
def within(func):
    """While ``func``'s decomposition runs (its indices guarded already, or
    made by the decomposition itself), the ops it records are not checked."""
    was = _state["outer"]
    _state["outer"] = func
    try:
        yield
    finally:
        _state["outer"] = was


# ------------------------------------------------ int64 state kept as int32
def int64_in_band(v: Value, emit) -> Value:
    """``v``, the new value of an int64 tensor updated in place (BatchNorm's
    ``num_batches_tracked += 1``) on a target that holds int64 as int32
    (``targets.narrows_int64``), clamped into +-(2**30 - 1) and flagged where
    the clamp changed it: the graph then fails with ``OverflowError`` instead
    of keeping a value the next graph's 32-bit arithmetic may wrap.

    ``passes.int64_range`` assumes int64 data on such a device lies in that
    band and refuses a graph whose int64 results may leave it; a counter's
    ``+ 1`` may, by one, so without this every training step of a model with
    batch norm ran eagerly. Graphs recorded without flags (``unchecked``: lm.jit,
    export; dry runs) are left as they are: the analysis refuses them instead."""
    if _state["unchecked"] or _dry_run[0] is not None:
        return v
    from ..passes.int64_range import ARGUMENT
    safe = emit(aten.clamp.default, (v, ARGUMENT[0], ARGUMENT[1]), {})[0]
    flag = emit(aten.any.default, (emit(aten.ne.Tensor, (safe, v), {})[0],), {})[0]
    _pending.append(Check(flag, v, OverflowError, (
        "an int64 tensor updated in place left +-(2**30 - 1), the range int64 data keeps on "
        "a device that computes int64 in 32 bits (passes/int64_range.py); run this part on "
        "the cpu target (lazy_mlir.set_target('cpu')), or set LAZY_MLIR_VULKAN_INT64=1 to "
        f"keep 64-bit integers on Vulkan; captured at {_location()}")))
    return safe


# ------------------------------------------------------------ at a sync point
def pending() -> bool:
    return bool(_pending)


def take_flag(order: dict, everything: bool, emit):
    """The pending checks a graph over the nodes ``order`` (Node -> position)
    can compute (their index is in it or is data; all of them with
    ``everything``, as mark_step does), removed from the pending list, and
    one Value holding their flags (or (None, [])); ``emit`` (capture's)
    records the stack of several flags."""
    _guards.clear()
    if not _pending:
        return None, []
    taken, kept = [], []
    for c in _pending:
        i = c.index
        if everything or i.data is not None or i.node in order:
            taken.append(c)
        else:
            kept.append(c)
    _pending[:] = kept
    if not taken:
        return None, []
    flags = [c.flag for c in taken]
    combined = flags[0] if len(flags) == 1 else emit(aten.stack.default, (flags,), {})[0]
    return combined, [(c.exc, c.message) for c in taken]


def raise_if_flagged(flags: torch.Tensor, checks: list) -> None:
    """In the worker, after the run: raise for the first set flag."""
    set_ = flags.reshape(-1).tolist()
    bad = [c for c, f in zip(checks, set_) if f]
    if not bad:
        return
    exc = bad[0][0]
    more = "".join(f"\n  also {m}" for _, m in bad[1:4])
    raise exc(f"lazy-mlir: {bad[0][1]}{more}\n(checked when the graph "
              "ran: mark_step runs graphs in the background, so the error surfaces at the next "
              "sync point; every tensor that graph computed raises it when read)")
