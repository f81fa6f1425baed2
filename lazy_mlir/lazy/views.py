"""Views: reading a view from its storage, and writing it back.

A view is recorded as steps (op, constant args, output index) from the
storage's value. Reading applies the steps as graph nodes; writing runs each
step's inverse (``slice`` -> ``slice_scatter``, ``view(dtype)`` -> a bitcast
back, ...) from the view back to the storage, the same functional form
PyTorch's functionalization produces (``scatter``).

A step with no exact inverse of its own (``unfold``, ``expand``,
``as_strided``, any other view op) is written back by its element map
(``write_back``): the view's steps from that step on, applied on the host to
a tensor of element numbers, say which element of the step's input each
element of the view is; the new input is one gather of the written view and
the old input. The map is exact for every view made of elements of its
input, chains included, and is computed once per (shape, steps).

A view whose elements overlap in memory (an ``expand``, an ``unfold`` with
step < size) is written as eager writes it only when every element written
to one place gets the same value (``fill_``, ``zero_``, a ``copy_`` of one
element); ``check_write`` raises for any other write before it is
recorded: eager's own error where eager refuses it (the op run on a CPU
stand-in laid out as the view), NotImplementedError where eager's result
depends on the order its kernel visits memory.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map

from ..graph.ir import DeviceData, TensorSpec, Value
from . import offsets

aten = torch.ops.aten

# Ops that alias their input without changing shape: no step is recorded.
IDENTITY = {aten.detach.default, aten.alias.default, aten.lift_fresh.default}


def is_view_op(func) -> bool:
    rets = func._schema.returns
    return bool(rets) and rets[0].alias_info is not None and not rets[0].alias_info.is_write


def is_inplace_view_op(func) -> bool:
    return torch.Tag.inplace_view in func.tags


def functional_view_op(func):
    """``t_`` -> ``t``, ``transpose_`` -> ``transpose.int``: the overload of the
    out-of-place op whose arguments have the same names."""
    packet = getattr(aten, func.__name__.split(".")[0].rstrip("_"))
    if func._overloadname in packet.overloads():
        return getattr(packet, func._overloadname)
    names = [a.name for a in func._schema.arguments]
    for name in packet.overloads():
        op = getattr(packet, name)
        if [a.name for a in op._schema.arguments] == names:
            return op
    raise NotImplementedError(f"lazy-mlir: no out-of-place form of {func}")


def _perm_inverse(dims, ndim):
    dims = [d % ndim for d in dims]
    inv = [0] * ndim
    for i, d in enumerate(dims):
        inv[d] = i
    return inv


_RESHAPES = frozenset({"view", "_unsafe_view", "reshape", "_reshape_alias", "squeeze",
                       "unsqueeze", "flatten", "view_as", "unflatten"})
# Steps ``scatter`` inverts exactly, each by a scatter op of its own (an
# injective map of the view's elements onto its input's).
_INVERTIBLE = _RESHAPES | {"t", "transpose", "swapaxes", "swapdims", "permute", "slice",
                           "select", "diagonal", "split", "split_with_sizes", "unbind",
                           "view_as_real", "view_as_complex"}


def has_inverse(op) -> bool:
    """Whether ``scatter`` writes a view made by ``op`` back by itself (kept
    on the op: an OpOverload's ``__hash__`` is a Python call)."""
    try:
        return op._lazy_mlir_inverse
    except AttributeError:
        how = op.__name__.split(".")[0] in _INVERTIBLE
    try:
        op._lazy_mlir_inverse = how
    except (AttributeError, TypeError):
        pass
    return how


def by_map_from(steps) -> int | None:
    """The first of ``steps`` written back by element map: the first with no
    inverse of its own, or the storage itself (0) when one is an
    ``as_strided``, whose strides address the storage, not its input; None
    when every step has an inverse."""
    first = None
    for i, s in enumerate(steps):
        if not has_inverse(s[0]):
            if s[0].__name__.startswith("as_strided"):
                return 0
            if first is None:
                first = i
    return first


def write_back(emit, steps, chain, new, view, layout=None):
    """The storage's new value after writing ``new`` into the view ``view``
    reached by ``steps`` from ``chain[0]``, the storage's value
    (``chain[i]`` is the input of ``steps[i]``). ``layout``: the spec the
    storage's memory is laid out as, where its value has other strides.

    Steps from the first one without an inverse of its own on are written
    together by their element map (``_write_by_map``), the rest one by one
    (``scatter``). Records nodes only; raises (recording nothing into the
    storage) a write eager refuses or whose result depends on eager's
    memory order (overlapping views: see the module's docstring)."""
    first = by_map_from(steps)
    if first is not None:
        new = _write_by_map(emit, steps[first:], chain[first], new, view,
                            layout if first == 0 else None)
        steps, chain = steps[:first], chain[:first]
    for step, base in zip(reversed(steps), reversed(chain)):
        new = scatter(emit, step, base, new)
    return new


def scatter(emit, step, base, new):
    """The value of the view's input after writing ``new`` into the view.

    ``emit(op, args, kwargs)`` records a node on Values and returns its outputs.
    """
    op, args, kwargs, index = step[:4]  # (a fifth: its ViewPlan, capture.apply_view)
    name = op.__name__.split(".")[0]
    shape = list(base.spec.shape)
    ndim = len(shape)

    def one(func, *a, **k):
        return emit(func, a, k)[0]

    if op is aten.view.dtype:  # the same bits, read as the input's dtype again
        return one(aten.view.dtype, _dense(one, new), base.spec.dtype)
    if name in _RESHAPES:
        return one(aten.reshape.default, new, shape)
    if name in ("t", "transpose", "swapaxes", "swapdims"):
        return one(op, new, *args, **kwargs)
    if name == "permute":
        return one(aten.permute.default, new, _perm_inverse(args[0], ndim))
    if name == "view_as_real":
        return one(aten.view_as_complex.default, _dense(one, new))
    if name == "view_as_complex":
        return one(aten.view_as_real.default, _dense(one, new))
    if name in ("slice", "select"):  # at a runtime offset (offsets.py), where lifted
        lifted = offsets.scatter(emit, op, args, kwargs, base, new)
        if lifted is not None:
            return lifted
    if name == "slice":
        dim, start, end, step_ = (list(args) + [0, None, None, 1][len(args):])[:4]
        return one(aten.slice_scatter.default, base, new, dim, start, end, step_)
    if name == "select":
        return one(aten.select_scatter.default, base, new, *args)
    if name == "diagonal":
        return one(aten.diagonal_scatter.default, base, new, *args, **kwargs)
    if name in ("split", "split_with_sizes"):
        dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % ndim
        if name == "split":
            sizes = [args[0]] * (-(-shape[dim] // args[0]))
        else:
            sizes = list(args[0])
        start = sum(sizes[:index])
        end = min(start + sizes[index], shape[dim])
        return one(aten.slice_scatter.default, base, new, dim, start, end, 1)
    if name == "unbind":
        dim = args[0] if args else kwargs.get("dim", 0)
        return one(aten.select_scatter.default, base, new, dim, index)
    raise NotImplementedError(  # (write_back sends other steps to _write_by_map)
        f"lazy-mlir: writing through a view made by {op} is not supported; "
        "call .clone() on the view before modifying it")


def _dense(one, v):
    """``v``, made contiguous when its spec is not (``view(dtype)`` and
    ``view_as_complex`` need a unit last stride)."""
    if v.spec.meta().is_contiguous():
        return v
    return one(aten.clone.default, v, memory_format=torch.contiguous_format)


# ------------------------------------------------- writing by element map
# In-place ops whose written value is one value at every element: through a
# view whose elements overlap, eager's result does not depend on which
# write of an element comes last (a ``copy_`` of one element is one too).
_ORDER_FREE = {aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default}
# Writes of one value where a mask says, order-free too: eager writes the
# value to a shared element where any view element on it is masked (and
# warns that masked_fill_ on an expanded tensor is deprecated); written
# back by ``_write_changed``, not by the last view element's value.
_MASKED = {aten.masked_fill_.Scalar, aten.masked_fill_.Tensor}
# Steps that keep the element order and only rename shapes: applied on the
# index tensor as ``reshape`` where its layout allows no ``view``.
_AS_RESHAPE = {"view", "_unsafe_view", "_reshape_alias"}
_approved = [None]  # the view whose overlapping write check_write let through
_masked = [False]  # whether that write is one of ``_MASKED``


class ElementMap:
    """Where a view's elements are in the input of its steps.

    ``gather``: for each element of the input (flattened), the position of
    the view's element written there (the last one, in the view's order,
    when several are), or ``numel(view) + i`` when none is: the new input is
    ``cat([new.flatten(), old.flatten()])[gather]``. ``covers``: every input
    element is written (no ``old`` needed); ``identity``: the view is its
    input's elements in order; ``overlap``: some element is written twice."""

    __slots__ = ("gather", "covers", "identity", "overlap", "_value", "index", "_index_value")

    def __init__(self, index: torch.Tensor, numel: int):
        flat = index.reshape(-1)
        n = flat.numel()
        last = torch.full((numel,), -1, dtype=torch.int64)
        last.scatter_reduce_(0, flat, torch.arange(n), reduce="amax")  # deterministic
        self.covers = bool((last >= 0).all())
        self.overlap = bool(torch.unique(flat).numel() != n)
        self.identity = self.covers and n == numel and torch.equal(flat, torch.arange(n))
        self.gather = torch.where(last >= 0, last, torch.arange(numel) + n)
        self._value = None
        # (overlapping views: each view element's input element, for
        # ``_write_changed``)
        self.index = flat if self.overlap else None
        self._index_value = None

    def value(self):
        """``gather`` as device data (uploaded once, shared: never written)."""
        if self._value is None:
            self._value = Value.of_data(DeviceData(TensorSpec.of(self.gather), host=self.gather))
        return self._value

    def index_value(self):
        """``index`` as device data, as ``value``."""
        if self._index_value is None:
            self._index_value = Value.of_data(DeviceData(TensorSpec.of(self.index),
                                                         host=self.index))
        return self._index_value


_maps: dict = {}
_held = [0]  # elements of the kept maps' gather indices
_HELD_MAX = 1 << 25


def element_map(steps, spec: TensorSpec) -> ElementMap:
    """The ``ElementMap`` of ``steps`` on an input laid out as ``spec``
    (its layout matters to an ``as_strided`` only), memoized. Raises
    NotImplementedError for a step that does not pick elements of its input
    (a ``view(dtype)`` of another width, ``view_as_real``) and for an
    ``as_strided`` reaching past the input's elements."""
    try:
        key = (spec, tuple((s[0], _hashable(s[1]), _hashable(s[2]), s[3]) for s in steps))
        hit = _maps.get(key)
    except TypeError:
        key, hit = None, None
    if hit is not None:
        return hit
    index, numel, dtype = _element_numbers(spec), spec.meta().numel(), spec.dtype
    for op, args, kwargs, i in (s[:4] for s in steps):
        if op is aten.view.dtype:
            if args[0].itemsize != dtype.itemsize:
                raise NotImplementedError(
                    f"lazy-mlir: writing through view({args[0]}) of a {dtype} tensor after a "
                    "view made by an op with no inverse of its own (unfold, expand, "
                    "as_strided) is not supported; call .clone() on the view before "
                    "modifying it")
            dtype = args[0]  # the same elements, read as another type of one width
            continue
        index = _apply_on_index(op, args, kwargs, i, index)
    if index.numel() and int(index.min()) < 0:
        raise NotImplementedError(
            "lazy-mlir: writing through an as_strided view that reaches past its tensor's "
            "elements is not supported; call .clone() on the view before modifying it")
    m = ElementMap(index, numel)
    if key is not None:
        _held[0] += numel
        if len(_maps) >= 1024 or _held[0] > _HELD_MAX:  # (each map holds numel int64s)
            _maps.clear()
            _held[0] = numel
        _maps[key] = m
    return m


def _element_numbers(spec: TensorSpec) -> torch.Tensor:
    """A tensor laid out as ``spec`` holding each element's number in
    ``spec``'s order, -1 at the places of its storage it does not use."""
    numel = 1
    for d in spec.shape:
        numel *= d
    numbers = torch.arange(numel).reshape(spec.shape)
    extent = 1 + spec.offset + sum((n - 1) * st for n, st in zip(spec.shape, spec.stride) if n)
    if numel == 0 or (spec.offset == 0 and extent == numel and numbers.stride() == spec.stride):
        return numbers
    storage = torch.full((max(extent, 1),), -1, dtype=torch.int64)
    out = storage.as_strided(spec.shape, spec.stride, spec.offset)
    out.copy_(numbers)
    return out


def _apply_on_index(op, args, kwargs, i, index):
    name = op.__name__.split(".")[0]
    if name in ("view_as_real", "view_as_complex"):
        raise NotImplementedError(
            f"lazy-mlir: writing through {op} after a view made by an op with no inverse "
            "of its own is not supported; call .clone() on the view before modifying it")
    if name in _AS_RESHAPE:
        try:
            return index.view(args[0])
        except RuntimeError:  # (a layout unlike the tensor's: the same elements)
            return index.reshape(args[0])
    out = op(index, *args, **kwargs)
    out = out[i] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.Tensor) or out.dtype is not torch.int64:
        raise NotImplementedError(
            f"lazy-mlir: writing through a view made by {op} is not supported; "
            "call .clone() on the view before modifying it")
    return out


def _hashable(a):
    if isinstance(a, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in a.items()))
    if isinstance(a, (list, tuple)):
        return tuple(_hashable(x) for x in a)
    hash(a)
    return a


def _write_by_map(emit, steps, base, new, view, layout=None):
    """``base``'s new value after writing ``new`` into the view ``steps``
    make of it, by the steps' ``ElementMap``: one gather, exact for any
    steps that pick elements of their input. A view whose elements overlap
    is written only as ``check_write`` allowed (the last write of an element
    wins: every write of it is the same value). The map is taken over
    ``layout`` where given: an ``as_strided`` addresses the storage's memory,
    not its value's strides, which a write through a transpose changed
    (fuzzer seed 970012: ``x.t().copy_(y)``, then a write through
    ``x.t().as_strided(...)`` landed on the wrong elements, silently)."""
    spec = base.spec
    if layout is not None and (layout.shape != spec.shape or layout.dtype != spec.dtype):
        layout = None
    m = element_map(steps, layout or spec)
    masked = False
    if m.overlap:
        if _approved[0] is not view:  # (a way in that does not check: foreach, ...)
            raise NotImplementedError(_overlap_message(steps, "this in-place op"))
        _approved[0], masked, _masked[0] = None, _masked[0], False

    def one(func, *a, **k):
        return emit(func, a, k)[0]

    flat = one(aten.reshape.default, new, [-1])
    if new.spec.dtype != spec.dtype:  # (a view(dtype) of one width among the steps)
        flat = one(aten.view.dtype, flat, spec.dtype)
    if masked:
        return _write_changed(one, m, base, flat)
    if not m.identity:
        if not m.covers:
            flat = one(aten.cat.default, [flat, one(aten.reshape.default, base, [-1])])
        flat = one(aten.index_select.default, flat, 0, m.value())
    return one(aten.reshape.default, flat, list(spec.shape))


def _write_changed(one, m: ElementMap, base, flat):
    """``base`` with each element that some element of the overlapping
    view changed set to that element's new value (``flat``), the others
    kept: a masked write of one value, where the view elements on one
    input element may be masked differently (the last one's value would
    keep the old value where an earlier one wrote). Unchanged elements
    are routed to one extra element, dropped after."""
    spec = base.spec
    numel = m.gather.numel()
    old = one(aten.reshape.default, base, [-1])
    index = m.index_value()
    changed = one(aten.ne.Tensor, flat, one(aten.index_select.default, old, 0, index))
    target = one(aten.where.ScalarOther, changed, index, numel)
    spare = one(aten.cat.default, [old, one(aten.slice.Tensor, old, 0, 0, 1)])
    put = one(aten.index_put.default, spare, [target], flat, False)
    return one(aten.reshape.default, one(aten.slice.Tensor, put, 0, 0, numel), list(spec.shape))


def check_write(t, func, args, kwargs) -> None:
    """Before the in-place ``func`` (called on ``args``, ``kwargs``) writes
    the lazy view ``t``, where ``t``'s elements overlap in memory: raise
    eager's own error where eager refuses the write (``func`` run on a CPU
    stand-in laid out as ``t``), NotImplementedError where eager's result
    depends on the order its kernel writes memory (anything but a fill or a
    copy of one element), else let ``write_back`` write it. Raises
    NotImplementedError too for a view no element map describes. Records
    nothing; views of invertible steps only cost a walk of their steps."""
    steps = t._view
    _check_bool_bytes(t, func, args)
    first = by_map_from(steps)
    if first is None:
        return
    meta = t._storage.value.spec.meta()
    for op, a, k, i in (s[:4] for s in steps[:first]):
        out = op(meta, *a, **k)
        meta = out[i] if isinstance(out, (tuple, list)) else out
    m = element_map(steps[first:], TensorSpec.of(meta))
    if not m.overlap:
        return
    src = args[1] if len(args) > 1 else None
    if func is aten.copy_.default and _same_elements(src, t):  # (eager: a copy onto itself
        _approved[0] = t                                         # is nothing)
        return
    _eager_refusal(t, func, args, kwargs)
    if func in _ORDER_FREE or (func is aten.copy_.default and isinstance(src, torch.Tensor)
                               and _one_element(src)):
        _approved[0] = t
        return
    value = args[2] if len(args) > 2 else kwargs.get("value")
    if func in _MASKED and (not isinstance(value, torch.Tensor) or value.numel() == 1):
        _approved[0], _masked[0] = t, True
        return
    raise NotImplementedError(_overlap_message(steps, str(func)))


def _check_bool_bytes(t, func, args) -> None:
    """A ``bool`` tensor's elements are 0 or 1 on the lazy device (a graph's
    ``i1``); eager keeps any byte written through a ``uint8`` (or ``int8``)
    view of one: ``x.view(torch.uint8).mul_(5)`` reads back 5 there, and
    the lazy device gave 1 (silent; fuzzer seeds 500133, 400241). Such a
    write raises NotImplementedError before it is recorded, unless what it
    writes is 0 or 1 (``zero_``, a ``copy_`` of a ``bool`` tensor, a
    ``fill_`` or a ``masked_fill_`` of 0, 1, False or True)."""
    if not t._view or t.dtype is torch.bool or t._storage.value.spec.dtype is not torch.bool:
        return
    if func is aten.zero_.default or (func is aten.copy_.default
                                      and getattr(args[1], "dtype", None) is torch.bool):
        return
    value = args[-1] if func in (aten.fill_.Scalar, aten.masked_fill_.Scalar) else None
    if type(value) in (bool, int) and value in (0, 1):
        return
    raise NotImplementedError(
        f"lazy-mlir: {func} writes through a {t.dtype} view of a bool tensor: the lazy "
        "device keeps a bool's elements as 0 and 1, and eager keeps any byte written; "
        "write into a uint8 copy instead (x.to(torch.uint8))")


def _same_elements(a, t) -> bool:
    """Whether ``a`` is ``t`` or a view of the same elements of its storage."""
    if a is t:
        return True
    return (isinstance(a, torch.Tensor) and getattr(a, "_storage", None) is t._storage
            and a.dtype == t.dtype and a.shape == t.shape and a.stride() == t.stride()
            and a.storage_offset() == t.storage_offset())


def _one_element(t: torch.Tensor) -> bool:
    """Whether every element of ``t`` is one element (``x[...] = 5``'s source)."""
    return all(n <= 1 or st == 0 for n, st in zip(t.shape, t.stride()))


def _eager_refusal(t, func, args, kwargs) -> None:
    """Raise eager's error for ``func`` writing a tensor laid out as ``t``
    (its overlap checks: ``unsupported operation: ...``), if it gives one.
    Run on zeros, with the CPU generator's state kept."""
    extent = 1 + t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n)
    target = torch.zeros(max(extent, 1), dtype=t.dtype).as_strided(
        t.shape, t.stride(), t.storage_offset())

    def stand_in(a):
        if isinstance(a, torch.Tensor) and a.device.type == "lazy":
            return torch.zeros(a.shape, dtype=a.dtype)
        if isinstance(a, torch.device) and a.type == "lazy":
            return torch.device("cpu")
        return a
    rest, kw = tree_map(stand_in, (tuple(args[1:]), dict(kwargs)))
    try:
        with torch.random.fork_rng(devices=[]):
            func(target, *rest, **kw)
    except RuntimeError as e:
        if str(e).startswith("unsupported operation"):
            raise RuntimeError(str(e)) from None
    except Exception:  # (any other error of the stand-in is not eager's answer)
        pass


def _overlap_message(steps, what) -> str:
    made_by = ", ".join(sorted({str(s[0]) for s in steps if not has_inverse(s[0])}))
    return (f"lazy-mlir: {what} writes through a view whose elements overlap in memory "
            f"(made by {made_by}); only fill_, zero_ and copy_ of one element are supported "
            "on such views (eager updates an element once per view element on it, in the "
            "order its kernel visits memory); call .clone() on the view before modifying it")
