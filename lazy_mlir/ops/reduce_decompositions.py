"""``index_reduce`` as ``scatter_reduce.two``, which the torch dialect has.

``index_reduce(x, dim, index, source, reduce)`` reduces slice ``source[..., i,
...]`` (``i`` along ``dim``) into ``x[..., index[i], ...]``: the scatter whose
index is ``index`` broadcast to ``source``'s shape along ``dim``. ATen's
``index_reduce`` and ``scatter_reduce`` share the reduction semantics
(``prod``, ``mean`` counting ``x`` itself when ``include_self``, ``amax`` /
``amin`` propagating NaN; integer ``mean`` rounds down, see
``bool_decompositions.scatter_reduce``).
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


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


REDUCE_DECOMPOSITIONS = {
    aten.index_reduce.default: index_reduce,
}
