"""``pack_padded_sequence`` on lazy tensors (``aten._pack_padded_sequence``).

Its lengths are a CPU tensor on every device (PyTorch requires it: CUDA
reads them on the host too), and the packed data's shape depends on their
values, so the op cannot be one node. It is what ATen's kernel does, on
the host's lengths: the time steps in runs of equal batch size, each run's
rows sliced from the (lazy) input and concatenated; ``batch_sizes`` comes
back on the CPU, as on CUDA. Its backward (``_pack_padded_sequence_backward``)
and ``pad_packed_sequence`` are composite ops PyTorch decomposes into views
and copies before they reach the device, and the RNNs' packed overloads
into per-step cells.
"""
from __future__ import annotations

import torch

aten = torch.ops.aten


def _checked_lengths(lengths: torch.Tensor, batch_size: int) -> list[int]:
    if lengths.device.type != "cpu" or lengths.dim() != 1 or lengths.dtype != torch.int64:
        raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got "
                           f"{lengths.dim()}D {lengths.device.type} "
                           f"{str(lengths.dtype).replace('torch.', '')} tensor")
    if lengths.numel() != batch_size:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{lengths.numel()} (batch_size={batch_size})")
    out = lengths.tolist()
    if out[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if any(a < b for a, b in zip(out, out[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    return out


def pack_padded_sequence(func, args, kwargs):
    """(data, batch_sizes) of ``input`` [T, B, *] (or [B, T, *]) packed by
    the host ``lengths``, as ATen's ``_pack_padded_sequence``."""
    bound = func._schema
    names = [a.name for a in bound.arguments]
    given = dict(zip(names, args), **kwargs)
    inp, batch_first = given["input"], given["batch_first"]
    if batch_first:
        inp = inp.transpose(0, 1)
    if inp.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    batch = inp.shape[1]
    lengths = _checked_lengths(given["lengths"], batch)
    step_shape = [-1, *inp.shape[2:]]
    steps, batch_sizes, prev = [], [], 0
    for i in range(batch):
        length = lengths[batch - 1 - i]
        if length > prev:
            rows = batch - i
            steps.append(inp[prev:length, :rows].contiguous().view(step_shape))
            batch_sizes += [rows] * (length - prev)
            prev = length
    return torch.cat(steps), torch.tensor(batch_sizes, dtype=torch.int64)


SPECIAL = {aten._pack_padded_sequence.default: pack_padded_sequence}
