"""Bool operands of ops whose lowering treats i1 as signed (True == -1).

torch-mlir lowers a bool operand of these ops with signed integer semantics:
``sort`` puts True first, ``clamp_min(True, False)`` is False, ``scatter_add``
of True + True is False (it wraps). (Its bool -> complex conversion, ``sitofp``,
gives -1 too; complex results are not captured at all.) Plain bool -> int/float
conversion is lowered right (``extui`` / ``uitofp``), so the scatters convert
their bool data operands to int32 and their result back with ``!= 0`` (eager's
logical or for a sum); masks and indices stay as they are. ``clamp_min`` /
``clamp_max`` of bools are ``or`` / ``and``; ``sort`` of bools sorts a unique
int64 key, which also makes it stable like eager's CPU sort. (Also here, as
it shares the ``scatter_reduce`` entry: an integer ``mean`` rounds down.)
"""
from __future__ import annotations

import functools
import threading

import torch

aten = torch.ops.aten

_inside = threading.local()


def _widen(t):
    return aten._to_copy.default(t, dtype=torch.int32)


def _narrow(t):
    return aten.ne.Scalar(t, 0)


def _as_int32(op, positions: tuple[int, ...]):
    """A decomposition of ``op`` for bool data operands at ``positions``;
    results that were bool come back bool."""

    def decomposition(*args, **kwargs):
        if getattr(_inside, "on", False) or not any(
                isinstance(args[i], torch.Tensor) and args[i].dtype == torch.bool
                for i in positions if i < len(args)):
            return NotImplemented
        args = list(args)
        for i in positions:
            if i < len(args) and isinstance(args[i], torch.Tensor) \
                    and args[i].dtype == torch.bool:
                args[i] = _widen(args[i])
        _inside.on = True
        try:
            out = op(*args, **kwargs)
        finally:
            _inside.on = False
        if isinstance(out, (tuple, list)):
            return type(out)(_narrow(o) if o.dtype == torch.int32 else o for o in out)
        return _narrow(out)

    return decomposition


@functools.lru_cache(maxsize=1)
def _torch_mlir_table() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    return get_decomposition_table()


def _bool_only(op, logical):
    """``clamp_min`` / ``clamp_max`` of two bool tensors as or / and; other
    dtypes take torch-mlir's decomposition of ``op``."""
    def decomposition(x, bound):
        if x.dtype != torch.bool or bound.dtype != torch.bool:
            theirs = _torch_mlir_table().get(op)
            return theirs(x, bound) if theirs else NotImplemented
        return logical(x, bound)
    return decomposition


def sort(x, dim=-1, descending=False):
    """A stable sort of bool (as eager's CPU sort): the key ``x * n + i`` is
    unique along ``dim``, so the sort cannot reorder ties."""
    if x.dtype != torch.bool or x.dim() == 0:
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    pos = aten.arange.start_step(0, n, 1, dtype=torch.int64, device=x.device)
    pos = aten.view.default(pos, [n if d == dim else 1 for d in range(x.dim())])
    first = aten.logical_not.default(x) if descending else x
    key = aten.add.Tensor(aten.mul.Tensor(aten._to_copy.default(first, dtype=torch.int64), n), pos)
    _inside.on = True
    try:
        indices = aten.sort.default(key, dim)[1]
    finally:
        _inside.on = False
    return aten.gather.default(x, dim, indices), indices


_scatter_reduce_bool = _as_int32(aten.scatter_reduce.two, (0, 3))


def scatter_reduce(x, dim, index, src, reduce, include_self=True):
    """Bool operands as above; an integer ``mean`` rounds down like eager
    (the lowering truncates toward zero): a floor division of the sum by the
    count, computed here from the sum and a scatter of ones."""
    if x.dtype == torch.bool or src.dtype == torch.bool:
        return _scatter_reduce_bool(x, dim, index, src, reduce, include_self=include_self)
    if reduce != "mean" or x.dtype.is_floating_point or x.dtype.is_complex \
            or getattr(_inside, "on", False):
        return NotImplemented
    total = aten.scatter_reduce.two(x, dim, index, src, "sum", include_self=include_self)
    base = aten.full_like.default(x, 1 if include_self else 0)
    count = aten.scatter_add.default(base, dim, index, aten.full_like.default(src, 1))
    count = aten.clamp_min.default(count, 1)
    return aten.div.Tensor_mode(total, count, rounding_mode="floor")


BOOL_DECOMPOSITIONS = {
    aten.sort.default: sort,
    aten.clamp_min.Tensor: _bool_only(aten.clamp_min.Tensor, aten.logical_or.default),  # max of bools
    aten.clamp_max.Tensor: _bool_only(aten.clamp_max.Tensor, aten.logical_and.default),  # min of bools
    aten.scatter_add.default: _as_int32(aten.scatter_add.default, (0, 3)),
    aten.scatter_reduce.two: scatter_reduce,
    aten.index_put.default: _as_int32(aten.index_put.default, (0, 2)),
}
