"""A compile says nothing on the user's stderr for what the program itself
chose: iree-compile warned, with the whole function's signature, where an op
reads a ``tensor.empty`` (MoE routing's ``empty_like`` filled in place by
``index_put_``; hunyuan_v1_moe printed 4 such warnings a step), though eager
reads the same uninitialized memory."""
from __future__ import annotations

import torch

from e2e_helpers import Counters, lazy


def _route(x, idx):
    out = torch.empty_like(idx)  # every element written below, as MoE code does
    out[torch.arange(idx.shape[0])] = idx.flip(0) * 2
    return out + x.sum().long()


def test_reading_an_empty_tensor_filled_in_place_compiles_without_warnings(capfd):
    x, idx = torch.randn(4, 3), torch.arange(7) * 3
    c = Counters()
    got = _route(lazy(x), lazy(idx)).cpu()
    assert c.delta("UncachedCompile") >= 1  # (compiled here: the session cache is fresh)
    assert torch.equal(got, _route(x, idx))
    assert "uninitialized" not in capfd.readouterr().err
