"""Views: reading a view from its storage, and writing it back.

A view is recorded as steps (op, constant args, output index) from the
storage's value. Reading applies the steps as graph nodes; writing runs each
step's inverse (``slice`` -> ``slice_scatter``, ...) from the view back to the
storage, the same functional form PyTorch's functionalization produces.
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

    if name in ("view", "_unsafe_view", "reshape", "_reshape_alias", "squeeze", "unsqueeze",
                "flatten", "view_as", "unflatten"):
        return one(aten.reshape.default, new, shape)
    if name in ("t", "transpose", "swapaxes", "swapdims"):
        return one(op, new, *args, **kwargs)
    if name == "permute":
        return one(aten.permute.default, new, _perm_inverse(args[0], ndim))
    if name == "slice":
        dim, start, end, step_ = (list(args) + [0, None, None, 1][len(args):])[:4]
        return one(aten.slice_scatter.default, base, new, dim, start, end, step_)
    if name == "select":
        return one(aten.select_scatter.default, base, new, *args)
    if name == "diagonal":
        return one(aten.diagonal_scatter.default, base, new, *args, **kwargs)
    if name == "as_strided":
        return one(aten.as_strided_scatter.default, base, new, *args, **kwargs)
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
    raise NotImplementedError(
        f"lazy-mlir: writing through a view made by {op} is not supported; "
        "call .clone() on the view before modifying it")
