"""NaN in arg-reductions: ``argmax``/``argmin`` (and the indices of
``max``/``min`` along a dim) of a float tensor with a NaN give the index of
the first NaN in eager (NaN is treated as the extreme);
torch-mlir's lowering compares with ``>``/``<`` and skips it. The first NaN
is found with an integer argmax of the NaN mask and chosen where a row has
one; the table's earlier decomposition (0-d inputs) runs after."""
from __future__ import annotations

import threading

import torch

aten = torch.ops.aten
_inside = threading.local()


def _nan_aware(op, then):
    def decomposition(x, dim=None, keepdim=False):
        if getattr(_inside, "on", False):
            return NotImplemented
        if x.dim() == 0 or not x.dtype.is_floating_point:  # no NaN to find (0-d: index 0)
            return then(x, dim, keepdim) if then is not None else NotImplemented
        _inside.on = True  # nested calls of the op are traced as they are
        try:
            plain = then(x, dim, keepdim) if then is not None else NotImplemented
            if plain is NotImplemented:
                plain = op(x, dim, keepdim)
            nan = aten.isnan.default(x)
            first_nan = aten.argmax.default(aten._to_copy.default(nan, dtype=torch.int32),
                                            dim, keepdim)
            if dim is None:
                any_nan = aten.any.default(nan)
            else:
                any_nan = aten.any.dim(nan, dim, keepdim)
            if isinstance(plain, tuple):  # max.dim / min.dim: (values, indices)
                return plain[0], aten.where.self(any_nan, first_nan, plain[1])
            return aten.where.self(any_nan, first_nan, plain)
        finally:
            _inside.on = False

    decomposition.__name__ = f"{op.__name__}_nan_first"
    return decomposition


def nan_aware_arg_reductions(table: dict) -> dict:
    """argmax/argmin (and the indices of max/min.dim) returning the first
    NaN, chained to ``table``'s entries."""
    ops = (aten.argmax.default, aten.argmin.default, aten.max.dim, aten.min.dim)
    return {op: _nan_aware(op, table.get(op)) for op in ops}
