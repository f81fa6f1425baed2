"""A gather from a column of a matrix compiles (``passes/gather_sources``):
``x[:, k]`` is a ``[n, 1]`` slice collapsed to ``[n]``; IREE 3.13 fused the
strided slice into the gather's dispatch and its LLVM translation failed
("builtin.unrealized_conversion_cast"), so the whole graph ran eagerly
(sweep hf/causal-lm/hunyuan_v1_moe: its MoE router's step graph)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import Counters, lazy

import lazy_mlir as lm


@pytest.mark.parametrize("gather", [
    lambda x, i: x[:, 1][i],
    lambda x, i: x[:, 2].index_select(0, i[:5]),
    lambda x, i: x[:, 0][i.view(2, 4)].to(torch.int32),
], ids=["index", "index_select", "2d_index_then_cast"])
def test_a_gather_from_a_column_compiles(gather):
    x0 = torch.arange(96, dtype=torch.int64).reshape(24, 4) * 3
    i0 = torch.tensor([5, 0, 23, 7, 7, 1, 12, 3])
    c = Counters()
    got = gather(lazy(x0), lazy(i0))
    lm.mark_step()
    assert torch.equal(got.cpu(), gather(x0, i0))
    assert c.delta("EagerGraph") == 0 and not c.fell_back()
