"""``torch.multinomial`` on lazy tensors, as ATen's CPU kernel draws it.

For one sample, or samples drawn without replacement (``Categorical.sample``,
an agent's action each step), ATen checks the probabilities on the host,
fills ``q`` with ``exponential_()`` from PyTorch's generator and takes the
argmax (or the top ``num_samples``) of ``probs / q``. Here the same: the
checks read one small vector (the step's graph up to ``probs`` runs, as
eager's op would have needed too), raise eager's errors, and the draw and
the argmax are recorded, ``exponential_`` a fill from the same stream
(``random.fill``): ``torch.manual_seed`` gives eager's samples. Other calls
(with replacement and several samples, a generator of its own, arguments
eager refuses) are recorded as they are: counted fallbacks, eager's errors.
"""
from __future__ import annotations

import torch

from .sync import to_host

aten = torch.ops.aten
_record = None  # dispatch.record, set by dispatch (which imports this module)


def _takes_fast_path(probs, num_samples, replacement, generator) -> bool:
    n = probs.shape[-1] if probs.dim() in (1, 2) else 0
    return generator is None and probs.dtype.is_floating_point and n > 0 \
        and 0 < num_samples <= n and (num_samples == 1 or not replacement)


def multinomial(func, args, kwargs):
    """Indices drawn from ``probs`` as ATen draws them (see the module)."""
    given = dict(zip(("self", "num_samples", "replacement"), args), **kwargs)
    probs, num_samples = given["self"], given["num_samples"]
    if not _takes_fast_path(probs, num_samples, given.get("replacement", False),
                            given.get("generator")):
        return _record(func, args, kwargs)
    bad = (probs.max() == float("inf")) | (probs.min() < 0) | probs.isnan().any()
    empty = (probs.sum(-1) == 0).any()
    bad, empty = to_host(torch.stack([bad, empty])).tolist()
    if bad:
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if empty:
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    ratio = probs / torch.empty_like(probs).exponential_(1.0)
    if num_samples == 1:
        return ratio.argmax(-1, keepdim=True)
    return ratio.topk(num_samples)[1]


SPECIAL = {aten.multinomial.default: multinomial}
