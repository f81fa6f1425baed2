"""Ops given Python numbers where a lifted scalar cannot stand as the
``.Tensor`` sibling's argument compute eager's values."""
from __future__ import annotations

import torch

from e2e_helpers import same_as_eager


def test_rsub_with_and_without_alpha():
    x = torch.tensor([1.0, -2.0, 0.5])
    same_as_eager(lambda t: (torch.rsub(t, 2.5, alpha=2), torch.rsub(t, 2.5), 1.5 - t), x,
                  no_fallback=True)


def test_a_number_as_the_self_of_add_and_sub():
    # (sweep hf/causal-lm/phimoe: PhiMoE's router computes
    # torch.add(0.3333, mask, alpha=0.6667); with alpha the number stayed the
    # self of the addcmul it became (float32: a crash in shape inference) or of
    # add.Tensor (int64: its graph failed to compile and ran eagerly), and a
    # self of 1 (torch.add(1, x)) was never lifted: the same eager graph)
    x, i = torch.tensor([0.0, 1.0, -2.5]), torch.tensor([0, 1, 2])
    for t in (x, i):
        same_as_eager(lambda t: (torch.add(0.3333, t, alpha=0.6667), torch.sub(1.5, t, alpha=2.5),
                                 torch.add(1, t), torch.mul(0, t)), t, no_fallback=True)
