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


def _index(x, indices):
    """``x[..., i, j, ...]`` with two or more adjacent integer index tensors
    as one index into those dims flattened (``i * size_j + j``): torch-mlir
    cannot lower several index tensors of a symbolic length ("failed to
    legalize torch.aten.index.Tensor_hacked_twin"), a MoE layer's
    ``routing_weights[top_x, idx]`` with one length per expert and step."""
    at = [k for k, t in enumerate(indices) if t is not None]
    if (len(at) < 2 or at != list(range(at[0], at[-1] + 1))
            or any(indices[k].dtype in (torch.bool, torch.uint8) for k in at)):
        return NotImplemented
    first, last = at[0], at[-1]
    flat_index = None
    for k in at:
        n = x.shape[k]
        i = torch.where(indices[k] < 0, indices[k] + n, indices[k])
        flat_index = i if flat_index is None else flat_index * n + i
    merged = 1
    for n in x.shape[first:last + 1]:
        merged = merged * n
    flat = x.reshape(*x.shape[:first], merged, *x.shape[last + 1:])
    return torch.ops.aten.index.Tensor(flat, [*indices[:first], flat_index])


SYMBOLIC_DECOMPOSITIONS = {torch.ops.aten.constant_pad_nd.default: _constant_pad_nd,
                           torch.ops.aten.index.Tensor: _index}
