"""Decompositions for traces with symbolic sizes: ops whose ATen shape
function cannot take a symbolic size (``pipeline/size_family.py``'s
modules with dynamic dimensions, ``ops/subgraph_sizes.py``'s templates)."""
from __future__ import annotations

import torch


def _constant_pad_nd(x, pad, value=0):
    """``constant_pad_nd`` as concatenations and narrows: ATen's own shape
    function specializes a symbolic size it pads, or on a lazy device
    tensor reads its storage offset, which it cannot (torch 2.13)."""
    for i in range(len(pad) // 2):
        dim = x.dim() - 1 - i
        lo, hi = pad[2 * i], pad[2 * i + 1]
        if lo < 0:
            x = x.narrow(dim, -lo, x.shape[dim] + lo)
        if hi < 0:
            x = x.narrow(dim, 0, x.shape[dim] + hi)
        parts = []
        for n in (lo, hi):
            if n > 0:
                shape = list(x.shape)
                shape[dim] = n
                parts.append(torch.full(shape, value, dtype=x.dtype, device=x.device))
            else:
                parts.append(None)
        x = torch.cat([p for p in (parts[0], x, parts[1]) if p is not None], dim)
    return x


SYMBOLIC_DECOMPOSITIONS = {torch.ops.aten.constant_pad_nd.default: _constant_pad_nd}
