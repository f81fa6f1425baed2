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
to one place gets the same value (``fill_``, ``zero_``); any other write
raises, before anything is recorded into the storage: eager's own error
where eager refuses (a dimension of stride 0), NotImplementedError where
eager's result depends on the order its kernel visits memory.
"""
from __future__ import annotations

import torch

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
    """Whether ``scatter`` writes a view made by ``op`` back by itself."""
    return op.__name__.split(".")[0] in _INVERTIBLE


def write_back(emit, steps, chain, new, view):
    """The storage's new value after writing ``new`` into the view ``view``
    reached by ``steps`` from ``chain[0]``, the storage's value
    (``chain[i]`` is the input of ``steps[i]``).

    Steps from the first one without an inverse of its own on are written
    together by their element map (``_write_by_map``), the rest one by one
    (``scatter``). Records nodes only; raises (recording nothing into the
    storage) a write eager refuses or whose result depends on eager's
    memory order (overlapping views: see the module's docstring)."""
    first = next((i for i, s in enumerate(steps) if not has_inverse(s[0])), None)
    if first is not None:
        new = _write_by_map(emit, steps[first:], chain[first], new, view)
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
# Ops whose written value is the same at every element: writing it through
# an overlapping view gives eager's result whatever the order.
_UNIFORM = {aten.fill.Scalar, aten.fill.Tensor, aten.zero.default}
# What eager raises for an in-place op on a tensor with a stride-0 dimension.
EAGER_OVERLAP_ERROR = (
    "unsupported operation: more than one element of the written-to tensor refers to a "
    "single memory location. Please clone() the tensor before performing the operation.")
# Steps that keep the element order and only rename shapes: applied on the
# index tensor as ``reshape`` (a ``view`` valid on the tensor's own strides
# need not be on the index tensor's).
_AS_RESHAPE = {"view", "_unsafe_view", "_reshape_alias"}


class ElementMap:
    """Where a view's elements are in the input of its steps.

    ``gather``: for each element of the input (flattened), the position of
    the view's element written there (the last one, in the view's order,
    when several are), or ``numel(view) + i`` when none is: the new input is
    ``cat([new.flatten(), old.flatten()])[gather]``. ``covers``: every input
    element is written (no ``old`` needed); ``identity``: the view is its
    input's elements in order; ``overlap``: some element is written twice."""

    __slots__ = ("gather", "covers", "identity", "overlap", "_value")

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

    def value(self):
        """``gather`` as device data (uploaded once, shared: never written)."""
        if self._value is None:
            from ..graph.ir import DeviceData, TensorSpec, Value
            self._value = Value.of_data(DeviceData(TensorSpec.of(self.gather), host=self.gather))
        return self._value


_maps: dict = {}


def element_map(steps, shape, dtype) -> ElementMap:
    """The ``ElementMap`` of ``steps`` on an input of ``shape`` and ``dtype``, memoized.
    Raises NotImplementedError for a step that does not pick elements of its
    input (a ``view(dtype)`` of another width, ``view_as_real``)."""
    try:
        key = (tuple(shape), dtype, tuple((s[0], _hashable(s[1]), _hashable(s[2]), s[3])
                                   for s in steps))
        hit = _maps.get(key)
    except TypeError:
        key, hit = None, None
    if hit is not None:
        return hit
    numel = 1
    for d in shape:
        numel *= d
    index = torch.arange(numel).reshape(shape)
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
    m = ElementMap(index, numel)
    if key is not None:
        if len(_maps) >= 1024:
            _maps.clear()
        _maps[key] = m
    return m


def _apply_on_index(op, args, kwargs, i, index):
    name = op.__name__.split(".")[0]
    if name in ("view_as_real", "view_as_complex"):
        raise NotImplementedError(
            f"lazy-mlir: writing through {op} after a view made by an op with no inverse "
            "of its own is not supported; call .clone() on the view before modifying it")
    if name in _AS_RESHAPE:
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


def _write_by_map(emit, steps, base, new, view):
    """``base``'s new value after writing ``new`` into the view ``steps``
    make of it, by the steps' ``ElementMap``: one gather, exact for any
    steps that pick elements of their input."""
    spec = base.spec
    m = element_map(steps, spec.shape, spec.dtype)
    if m.overlap and not (new.node is not None and new.node.op in _UNIFORM):
        _refuse_overlap(steps, view)

    def one(func, *a, **k):
        return emit(func, a, k)[0]

    flat = one(aten.reshape.default, new, [-1])
    if new.spec.dtype != spec.dtype:  # (a view(dtype) of one width among the steps)
        flat = one(aten.view.dtype, flat, spec.dtype)
    if not m.identity:
        if not m.covers:
            flat = one(aten.cat.default, [flat, one(aten.reshape.default, base, [-1])])
        flat = one(aten.index_select.default, flat, 0, m.value())
    return one(aten.reshape.default, flat, list(spec.shape))


def _refuse_overlap(steps, view):
    """Raise for a write (not a fill) through a view whose elements overlap:
    eager's own error where eager refuses it (a dimension of stride 0 and
    size > 1: ``expand``), else NotImplementedError (eager applies the op
    element by element in the order its kernel visits memory, so that an
    element is updated once per view element on it)."""
    if any(n > 1 and st == 0 for n, st in zip(view.shape, view.stride())):
        raise RuntimeError(EAGER_OVERLAP_ERROR)
    made_by = ", ".join(sorted({str(s[0]) for s in steps if not has_inverse(s[0])}))
    raise NotImplementedError(
        f"lazy-mlir: this in-place op writes through a view whose elements overlap in memory "
        f"(made by {made_by}); only fill_ and zero_ are supported on such views (eager "
        "updates an element once per view element on it, in its kernel's memory order); "
        "call .clone() on the view before modifying it")
