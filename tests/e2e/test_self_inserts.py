"""A slice of a tensor copied into the same tensor, shifted (mBART's
``shift_tokens_right``): the clone folds away and IREE copied the view over
itself in place (``passes/self_inserts.py``). Silent wrong values along an
inner dimension, a runtime error along the outer one."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import lazy


def _shift_right(x, dim):
    x = x.clone()
    n = x.shape[dim]
    x.narrow(dim, 1, n - 1).copy_(x.narrow(dim, 0, n - 1).clone())
    return x


def test_shift_by_one_along_each_dimension_gives_eager_values(counters):
    x0 = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    for dim in (1, 0):
        y = _shift_right(lazy(x0), dim)
        lm.mark_step()
        assert torch.equal(y.cpu(), _shift_right(x0, dim)), f"dim {dim}"
    assert counters.delta("EagerGraph") == 0


def test_mbart_shift_tokens_right_gives_eager_values():
    def shift(ids, pad=1):  # (transformers' mbart shift_tokens_right, without the import)
        out = ids.clone()
        out.masked_fill_(out == -100, pad)
        eos = (out.ne(pad).sum(dim=1) - 1).unsqueeze(-1)
        start = out.gather(1, eos).squeeze()
        out[:, 1:] = out[:, :-1].clone()
        out[:, 0] = start
        return out
    ids = torch.randint(3, 250, (2, 16), generator=torch.Generator().manual_seed(0))
    got = shift(lazy(ids))
    lm.mark_step()
    assert torch.equal(got.cpu(), shift(ids))
