"""Negative indices and bool masks of indexed writes (``x[idx] = v``, ``index_put_``).

torch-mlir 20261001 lowers ``index_put`` with the index values used as
offsets as they are: a negative index (valid in PyTorch, counted from the
end) wrote outside the tensor, losing the write and corrupting memory. Each
integer index is wrapped once (``i + size`` where ``i < 0``) before the op,
which is then traced as itself. (Reads, ``index.Tensor``, wrap correctly.)
A single bool mask becomes a ``where`` (``_masked_write``).
"""
from __future__ import annotations

import threading

import torch

aten = torch.ops.aten
_wrapping = threading.local()


def _wrapped(x, indices):
    """``indices`` with negative entries counted from the end, or None when
    there is nothing this rewrite can do (bool masks shift the dims)."""
    if getattr(_wrapping, "on", False):
        return None  # the op re-entered from our own decomposition
    out = []
    for dim, i in enumerate(indices):
        if i is None:
            out.append(None)
            continue
        if i.dtype == torch.bool or i.dtype.is_floating_point:
            return None
        size = x.shape[dim]
        out.append(aten.where.self(aten.lt.Scalar(i, 0), aten.add.Scalar(i, size), i))
    return out


def _masked_write(x, indices, values, accumulate):
    """``x[..., mask] = values`` (or ``+=``) for one bool mask after leading
    ``None`` indices, as a ``where``, or None when the values take the
    selected elements one by one (their count is only known at run time).

    torch-mlir turns a mask into a dynamic-length ``nonzero`` whose
    ``index_put`` lowering broadcasts the values over an empty index wrongly:
    an all-False mask with ``accumulate`` added the values into a row (int64)
    or wrote outside the tensor (float32, SIGSEGV)."""
    p = 0
    while p < len(indices) and indices[p] is None:
        p += 1
    if p == len(indices) or any(i is not None for i in indices[p + 1:]):
        return None
    mask = indices[p]
    k = mask.dim()
    if mask.dtype not in (torch.bool, torch.uint8) or k == 0 \
            or tuple(mask.shape) != tuple(x.shape[p:p + k]) or values.dtype != x.dtype \
            or (accumulate and x.dtype == torch.bool):
        return None
    trailing = x.dim() - p - k
    v = values
    if v.dim() > trailing:  # v reaches the dim of the selected elements
        count_dim = v.dim() - trailing - 1
        if v.shape[count_dim] != 1:
            return None
        v = aten.reshape.default(v, [*v.shape[:count_dim], *[1] * k, *v.shape[count_dim + 1:]])
    m = aten.reshape.default(mask if mask.dtype == torch.bool else aten.ne.Scalar(mask, 0),
                             [*mask.shape, *[1] * trailing])
    new = aten.add.Tensor(x, v) if accumulate else v
    return aten.where.self(m, new, x)


def _wrapping_decomposition(op, then):
    """``op`` with its indices wrapped, then ``then`` (the table's earlier
    decomposition of ``op``, if any) or the op itself."""
    target = aten.index_put.default

    def decomposition(x, indices, *rest, **kwargs):
        if op is aten._index_put_impl.default:
            rest, kwargs = rest[:2], {k: v for k, v in kwargs.items() if k != "unsafe"}
        wrapped = _wrapped(x, indices)
        if wrapped is None:
            if getattr(_wrapping, "on", False) or not rest:
                return NotImplemented
            out = _masked_write(x, indices, rest[0],
                                rest[1] if len(rest) > 1 else kwargs.get("accumulate", False))
            return NotImplemented if out is None else out
        _wrapping.on = True  # nested calls of the op are traced as they are
        try:
            if then is not None:
                out = then(x, wrapped, *rest, **kwargs)
                if out is not NotImplemented:
                    return out
            return target(x, wrapped, *rest, **kwargs)
        finally:
            _wrapping.on = False

    decomposition.__name__ = f"{op.__name__}_wrapping_negative_indices"
    return decomposition


def wrap_negative_indices(table: dict) -> dict:
    """Decompositions of the indexed writes that wrap negative indices first,
    chained to what ``table`` already does for them."""
    return {op: _wrapping_decomposition(op, table.get(op))
            for op in (aten.index_put.default, aten._index_put_impl.default)}
