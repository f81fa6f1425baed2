"""The backward of ``x[mask] = values`` without a data-dependent shape.

A write through a boolean mask (wav2vec2's and HuBERT's masked time steps,
``hidden[mask_time_indices] = masked_spec_embed``) is captured as a
``where`` (``ops/index.py``), but autograd's formula for its values is
``grad[mask]`` (``IndexPutBackward0``), a tensor with one row per true
element, which compiled autograd then sums to the values' shape. The count
is only known at run time, so the backward could not be traced as one node:
it ran op by op, the ``index`` eagerly (a graph cut in every step; wav2vec2's
step 33x eager's).

Where the values do not have a row per selected element (they broadcast
over them, as a vector or a scalar), that sum is ``where(mask, grad, 0)``
summed over the mask's dims: static shapes, the same values (summed in
another order). ``self``'s gradient is ``where(mask, 0, grad)`` (or ``grad``
when accumulating), as the formula's ``index_put`` of zeros. Other index
forms keep autograd's own formula.
"""
from __future__ import annotations

import torch

from ..ops.mask_index import count_dim, lone_index

# Compiled autograd's names of the backward of ``index_put_`` / ``index_put``
# and of ``_index_put_impl_`` (same arguments).
NAMES = ("IndexPutBackward0", "IndexPutImplBackward0")


def replaces(target) -> bool:
    """Whether ``target`` (a compiled-autograd graph's call) is one ``masked``
    stands in for."""
    return (getattr(target, "__module__", None) == "torch._dynamo.compiled_autograd.ops"
            and getattr(target, "__name__", None) in NAMES)


def masked(original):
    """``original`` (an ``IndexPutBackward0`` call) with a mask's formula
    where it applies."""
    def index_put_backward(grads, needs_input_grad, accumulate, indices, values_info, *rest):
        out = _by_mask(grads, needs_input_grad, accumulate, indices, values_info)
        if out is None:
            return original(grads, needs_input_grad, accumulate, indices, values_info, *rest)
        return out
    index_put_backward.__module__ = __name__
    return index_put_backward


def _by_mask(grads, needs_input_grad, accumulate, indices, values_info):
    """[self's gradient, the values'] for one boolean mask after leading
    ``None`` indices and values without a row per selected element; None
    otherwise."""
    g = grads[0] if grads else None
    if not isinstance(g, torch.Tensor):
        return None
    found = lone_index(indices)
    if found is None:
        return None
    p, mask = found
    k = mask.dim() if isinstance(mask, torch.Tensor) else 0
    if k == 0 or mask.dtype not in (torch.bool, torch.uint8) \
            or tuple(mask.shape) != tuple(g.shape[p:p + k]):
        return None
    trailing = g.dim() - p - k
    sizes = list(values_info[0])
    count_at = count_dim(g.dim(), p, k, sizes)  # the values' dim against the selected rows
    if count_at is not None and sizes[count_at] != 1:
        return None
    m = mask if mask.dtype == torch.bool else mask.ne(0)
    m = m.reshape([1] * p + list(mask.shape) + [1] * trailing)
    zero = g.new_zeros(())
    out = [None, None]
    if needs_input_grad[0]:
        out[0] = g if accumulate else torch.where(m, zero, g)
    if needs_input_grad[1]:
        # [*leading, 1, *trailing]: grad[mask] summed over its rows (kept as
        # one); compiled autograd sums that to the values' shape
        out[1] = torch.where(m, g, zero).sum(list(range(p, p + k))).unsqueeze(p)
    return out
