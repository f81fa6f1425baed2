"""A gather from a column of a matrix compiles (``passes/gather_sources``):
``x[:, k]`` is a ``[n, 1]`` slice collapsed to ``[n]``; IREE 3.13 fused the
strided slice into the gather's dispatch and its LLVM translation failed
("builtin.unrealized_conversion_cast"), so the whole graph ran eagerly
(sweep hf/causal-lm/hunyuan_v1_moe: its MoE router's step graph). The
same through elementwise ops between the slice and the gather
(``x[::2].float()[i]``: fuzzer corpus seed 94)."""
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


@pytest.mark.parametrize("gather", [
    lambda x, i: x[::2].float()[i],
    lambda x, i: x[1::2].float()[i],
    lambda x, i: (x.reshape(2, 4)[:, ::2].float() * 0.5)[i % 2],
], ids=["every_other", "every_other_from_1", "reshaped_then_scaled"])
def test_a_gather_through_elementwise_ops_from_a_slice_compiles(gather):
    """An elementwise op between the slice and the gather: IREE fused both
    into the gather's dispatch and failed the same way (fuzzer corpus seed 94:
    ``v[torch.tensor([1, 0, 0])]`` of a float copy of a strided uint8 view)."""
    x0 = torch.arange(8, dtype=torch.uint8) * 3
    i0 = torch.tensor([1, 0, 3])
    c = Counters()
    got = gather(lazy(x0), lazy(i0))
    lm.mark_step()
    assert torch.equal(got.cpu(), gather(x0, i0))
    assert c.delta("EagerGraph") == 0 and not c.fell_back()
