"""Negative indices and bool masks of indexed writes (``x[idx] = v``, ``index_put_``).

torch-mlir 20261001 lowers ``index_put`` with the index values used as
offsets as they are: a negative index (valid in PyTorch, counted from the
end) wrote outside the tensor, losing the write and corrupting memory. Each
integer index is wrapped once (``i + size`` where ``i < 0``) before the op,
which is then traced as itself. (Reads, ``index.Tensor``, wrap correctly.)
A single bool mask becomes a ``where`` (``_masked_write``). All before import.

Also here, at capture: ``put`` (a flat ``index_put``) and ``index_reduce``
(a ``scatter_reduce``).
"""
from __future__ import annotations

import torch

from .mask_index import count_dim, lone_index
from .registry import CAPTURE, IMPORT, ReentryGuard, register_decomposition

aten = torch.ops.aten
_wrapping = ReentryGuard()


def _wrapped(x, indices):
    """``indices`` with negative entries counted from the end, or None when
    there is nothing this rewrite can do (bool masks shift the dims)."""
    if _wrapping.active:
        return None  # the op re-entered from our own decomposition
    out = []
    for dim, i in enumerate(indices):
        if i is None:
            out.append(None)
            continue
        if i.dtype == torch.bool or i.dtype.is_floating_point:
            return None
        size = x.shape[dim]
        if i.dtype != torch.int64:  # (torch-mlir lists the indices as one type, its
            # int64 aranges for the ``None`` dims among them: an int32 index, as
            # PyTorch's ``unfold_backward`` makes, failed to verify)
            i = aten._to_copy.default(i, dtype=torch.int64)
        out.append(aten.where.self(aten.lt.Scalar(i, 0), aten.add.Scalar(i, size), i))
    return out


def _masked_write(x, indices, values, accumulate):
    """``x[..., mask] = values`` (or ``+=``) for one bool mask after leading
    ``None`` indices, as a ``where``; values given one per selected element
    (the backward of ``w[mask]``) are gathered by rank (``_by_rank``).

    torch-mlir turns a mask into a dynamic-length ``nonzero`` whose
    ``index_put`` lowering broadcasts the values over an empty index wrongly:
    an all-False mask with ``accumulate`` added the values into a row (int64)
    or wrote outside the tensor (float32, SIGSEGV)."""
    found = lone_index(indices)
    if found is None:
        return None
    p, mask = found
    k = mask.dim()
    if mask.dtype not in (torch.bool, torch.uint8) or k == 0 \
            or tuple(mask.shape) != tuple(x.shape[p:p + k]) or values.dtype != x.dtype \
            or (accumulate and x.dtype == torch.bool):
        return None
    trailing = x.dim() - p - k
    v = values
    bool_mask = mask if mask.dtype == torch.bool else aten.ne.Scalar(mask, 0)
    at = count_dim(x.dim(), p, k, v.shape)
    if at is not None:  # v reaches the dim of the selected elements
        if v.shape[at] != 1:
            v = _by_rank(v, at, bool_mask)
        else:
            v = aten.reshape.default(v, [*v.shape[:at], *[1] * k, *v.shape[at + 1:]])
    m = aten.reshape.default(bool_mask, [*mask.shape, *[1] * trailing])
    new = aten.add.Tensor(x, v) if accumulate else v
    return aten.where.self(m, new, x)


def _by_rank(v, count_dim, mask):
    """``v`` (one row per selected element along ``count_dim``) spread over
    the mask's shape: the element a mask position selects is the
    ``rank``-th, ``rank`` the number of selected positions before it. A
    static gather, where torch-mlir's dynamic-length ``nonzero`` made an
    ``index_put`` IREE rejects ("mismatch in shape of indices and update
    value"). Eager raises when the count of selected elements is not
    ``v``'s; capture checks that (``lazy/bounds.py``, mask counts): here
    the rank is only clamped into ``v``."""
    n = v.shape[count_dim]
    flat = aten.reshape.default(mask, [-1])
    if n == 0:  # nothing selected (else the count check raises)
        return aten.new_zeros.default(v, [*v.shape[:count_dim], *mask.shape,
                                          *v.shape[count_dim + 1:]])
    rank = aten.sub.Tensor(aten.cumsum.default(flat, 0, dtype=torch.int64), 1)
    rank = aten.clamp.default(rank, 0, n - 1)
    picked = aten.index_select.default(v, count_dim, rank)
    return aten.reshape.default(picked, [*v.shape[:count_dim], *mask.shape,
                                         *v.shape[count_dim + 1:]])


def _wrapping_decomposition(op, then):
    """``op`` with its indices wrapped, then ``then`` (the table's earlier
    decomposition of ``op``, if any) or the op itself."""
    target = aten.index_put.default

    def decomposition(x, indices, *rest, **kwargs):
        if op is aten._index_put_impl.default:
            rest, kwargs = rest[:2], {k: v for k, v in kwargs.items() if k != "unsafe"}
        wrapped = _wrapped(x, indices)
        if wrapped is None:
            if _wrapping.active or not rest:
                return NotImplemented
            out = _masked_write(x, indices, rest[0],
                                rest[1] if len(rest) > 1 else kwargs.get("accumulate", False))
            return NotImplemented if out is None else out
        with _wrapping:  # nested calls of the op are traced as they are
            if then is not None:
                out = then(x, wrapped, *rest, **kwargs)
                if out is not NotImplemented:
                    return out
            return target(x, wrapped, *rest, **kwargs)

    decomposition.__name__ = f"{op.__name__}_wrapping_negative_indices"
    return decomposition


@register_decomposition(aten.put.default, scope=CAPTURE)
def put(x, index, source, accumulate=False):
    """``x.flatten()[index] = source`` (or ``+=``) as an ``index_put`` on the
    flattened tensor."""
    flat = aten.reshape.default(x, [-1])
    index = aten.reshape.default(index, [-1])
    # Negative indices counted from the end here: the compiled index_put
    # does not wrap them (it writes out of bounds).
    index = aten.where.self(aten.lt.Scalar(index, 0), aten.add.Scalar(index, flat.numel()), index)
    out = aten.index_put.default(flat, [index], aten.reshape.default(source, [-1]), accumulate)
    return aten.reshape.default(out, list(x.shape))


# Chained over the registrations below them (the bool ``index_put`` of
# ``elementwise.py``): priority 10, after every plain import-time entry.
register_decomposition([aten.index_put.default, aten._index_put_impl.default], scope=IMPORT,
                       priority=10, overrides=True, chained=True)(_wrapping_decomposition)


# -- index_reduce --------------------------------------------------------------
# ``index_reduce`` as ``scatter_reduce.two``, which the torch dialect has.
#
# ``index_reduce(x, dim, index, source, reduce)`` reduces slice ``source[..., i,
# ...]`` (``i`` along ``dim``) into ``x[..., index[i], ...]``: the scatter whose
# index is ``index`` broadcast to ``source``'s shape along ``dim``. ATen's
# ``index_reduce`` and ``scatter_reduce`` share the reduction semantics
# (``prod``, ``mean`` counting ``x`` itself when ``include_self``, ``amax`` /
# ``amin`` propagating NaN; integer ``mean`` rounds down, see
# ``bool_decompositions.scatter_reduce``).

@register_decomposition(aten.index_reduce.default, scope=CAPTURE)
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    if index.dim() > 1 or x.dim() != source.dim():
        return NotImplemented
    if x.dim() == 0:  # a 0-d x and source are one-element rows
        out = index_reduce(aten.reshape.default(x, [1]), 0, aten.reshape.default(index, [-1]),
                           aten.reshape.default(source, [1]), reduce, include_self=include_self)
        return aten.reshape.default(out, [])
    dim = dim % x.dim()
    shape = [index.shape[0] if d == dim else 1 for d in range(source.dim())]
    expanded = aten.expand.default(aten.view.default(index, shape), list(source.shape))
    return aten.scatter_reduce.two(x, dim, expanded, source, reduce, include_self=include_self)
