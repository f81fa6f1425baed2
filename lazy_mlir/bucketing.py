"""Optional bucketing: pad a varying dimension up to one of a few fixed sizes.

An alternative to dynamic dimensions (``LAZY_MLIR_DYNAMIC``) for users who
prefer a few static shapes: each bucket compiles once, static, and the padding
costs compute (a batch of length 17 padded to 32 does ~2x the work); the loss
must ignore the padded positions (pad labels with ``-100``, cross entropy's
``ignore_index``, or pass a mask)."""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F

DEFAULT_BUCKETS = (16, 32, 64, 128, 256, 512)


def bucket_for(length: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> int:
    """The smallest bucket >= ``length``; a length over the largest is an error."""
    for b in sorted(buckets):
        if b >= length:
            return b
    raise ValueError(f"length {length} exceeds the largest bucket {max(buckets)}")


def pad_to_bucket(tensor: torch.Tensor, dim: int, buckets: Sequence[int] = DEFAULT_BUCKETS,
                  value=0) -> torch.Tensor:
    """``tensor`` padded with ``value`` at the end of ``dim`` up to its bucket."""
    dim = dim % tensor.dim()
    extra = bucket_for(tensor.shape[dim], buckets) - tensor.shape[dim]
    if extra == 0:
        return tensor
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [0, extra]
    return F.pad(tensor, pad, value=value)


def bucket_collate(dim: int = 1, buckets: Sequence[int] = DEFAULT_BUCKETS, values=None):
    """A ``DataLoader`` ``collate_fn``: default collation, then every tensor
    of a dict batch padded on ``dim`` to its bucket (``values``: pad value per
    key, e.g. ``{"labels": -100}``; 0 otherwise). Samples of one batch must
    share their length (pad them first otherwise)."""
    from torch.utils.data import default_collate
    values = values or {}

    def collate(samples):
        batch = default_collate(samples)
        if isinstance(batch, dict):
            return {k: pad_to_bucket(v, dim, buckets, values.get(k, 0))
                    if isinstance(v, torch.Tensor) and v.dim() > dim else v
                    for k, v in batch.items()}
        return pad_to_bucket(batch, dim, buckets, values.get(None, 0))
    return collate
