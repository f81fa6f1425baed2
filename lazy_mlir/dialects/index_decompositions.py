"""Negative indices of indexed writes (``x[idx] = v``, ``index_put_``).

torch-mlir 20261001 lowers ``index_put`` with the index values used as
offsets as they are: a negative index (valid in PyTorch, counted from the
end) wrote outside the tensor, losing the write and corrupting memory. Each
integer index is wrapped once (``i + size`` where ``i < 0``) before the op,
which is then traced as itself. (Reads, ``index.Tensor``, wrap correctly.)
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


def _wrapping_decomposition(op, then):
    """``op`` with its indices wrapped, then ``then`` (the table's earlier
    decomposition of ``op``, if any) or the op itself."""
    target = aten.index_put.default

    def decomposition(x, indices, *rest, **kwargs):
        wrapped = _wrapped(x, indices)
        if wrapped is None:
            return NotImplemented
        if op is aten._index_put_impl.default:
            rest, kwargs = rest[:2], {k: v for k, v in kwargs.items() if k != "unsafe"}
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
