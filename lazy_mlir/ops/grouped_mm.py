"""``torch._grouped_mm`` (mixture-of-experts layers) at capture, as batched
matmuls masked by group.

``_grouped_mm(a, b, offs)`` multiplies groups of rows (or of the contracted
or column dimension) by one matrix each; ``offs`` holds each group's end,
cumulative. The groups are data, so the compiler cannot slice by them;
instead every matrix multiplies every row and a mask keeps each row's own
group (``offs`` stays a tensor in the graph: one compile for any routing).
That costs the number of groups times the FLOPs of the grouped product: it
is taken only while the masked intermediate stays below ``_MAX_ELEMENTS``;
past that the op runs eagerly (counted ``aten::_grouped_mm``).

The layouts (as ATen's CPU kernel, ``offs`` int32 of length E):

- 2-d x 3-d: ``(S, K) x (E, K, N) -> (S, N)``, row ``s`` by ``b[e]`` of its group;
- 3-d x 2-d: ``(E, M, K) x (K, N) -> (M, N)``, column ``n`` by ``a[e]``;
- 2-d x 2-d: ``(M, K) x (K, N) -> (E, M, N)``, the contraction split by group
  (an empty group gives zeros: the weight gradient of the first layout);
- 3-d x 3-d: ``bmm`` (no ``offs``).

Rows or columns past ``offs[-1]`` are left uninitialized by the CPU kernel;
here they are zeros.
"""
from __future__ import annotations

import torch

from .registry import CAPTURE, register_decomposition

aten = torch.ops.aten
_MAX_ELEMENTS = 1 << 26


def _membership(offs, n: int):
    """(E, n) bool: position ``i`` lies in group ``e`` (``offs[e-1] <= i < offs[e]``)."""
    ends = aten._to_copy.default(offs, dtype=torch.int64)
    starts = aten.constant_pad_nd.default(aten.slice.Tensor(ends, 0, 0, -1), [1, 0], 0)
    pos = aten.unsqueeze.default(aten.arange.default(n, dtype=torch.int64, device=offs.device), 0)
    return aten.logical_and.default(aten.ge.Tensor(pos, aten.unsqueeze.default(starts, 1)),
                                    aten.lt.Tensor(pos, aten.unsqueeze.default(ends, 1)))


def _masked_sum(y, keep):
    """``sum_e y[e]`` where ``keep`` (broadcast to ``y``) holds, else 0."""
    zero = torch.zeros((), dtype=y.dtype, device=y.device)
    return aten.sum.dim_IntList(aten.where.self(keep, y, zero), [0])


@register_decomposition(aten._grouped_mm.default, scope=CAPTURE)
def grouped_mm(a, b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` (module docstring)."""
    if bias is not None or (out_dtype is not None and out_dtype != a.dtype) \
            or a.dtype != b.dtype:
        return NotImplemented
    if offs is None:
        return aten.bmm.default(a, b) if a.dim() == 3 and b.dim() == 3 else NotImplemented
    groups = offs.shape[0]
    if a.dim() == 2 and b.dim() == 3:  # rows by group
        (s, k), n = a.shape, b.shape[2]
        if groups * s * n > _MAX_ELEMENTS:
            return NotImplemented
        y = aten.bmm.default(aten.expand.default(aten.unsqueeze.default(a, 0), [groups, s, k]), b)
        return _masked_sum(y, aten.unsqueeze.default(_membership(offs, s), 2))
    if a.dim() == 3 and b.dim() == 2:  # columns by group
        (_, m, k), n = a.shape, b.shape[1]
        if groups * m * n > _MAX_ELEMENTS:
            return NotImplemented
        y = aten.bmm.default(a, aten.expand.default(aten.unsqueeze.default(b, 0), [groups, k, n]))
        return _masked_sum(y, aten.unsqueeze.default(_membership(offs, n), 1))
    if a.dim() == 2 and b.dim() == 2:  # the contraction by group
        (m, k), n = a.shape, b.shape[1]
        if groups * (m + n) * k > _MAX_ELEMENTS:
            return NotImplemented
        keep = aten.unsqueeze.default(_membership(offs, k), 1)  # (E, 1, K)
        zero = torch.zeros((), dtype=a.dtype, device=a.device)
        masked = aten.where.self(keep, aten.unsqueeze.default(a, 0), zero)  # (E, M, K)
        return aten.bmm.default(masked, aten.expand.default(aten.unsqueeze.default(b, 0),
                                                            [groups, k, n]))
    return NotImplemented
