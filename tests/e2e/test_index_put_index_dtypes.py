"""``index_put`` with an int32 index beside a ``None`` (a whole dimension)
compiles (``ops/index.py``: indices widened to int64)."""
from __future__ import annotations

import torch

from e2e_helpers import Counters, lazy

import lazy_mlir as lm


def test_an_int32_index_after_a_whole_dimension_compiles():
    """torch-mlir fills the ``None`` dims with int64 aranges and lists them
    with the int32 index as one type: the graph failed to verify ("operand
    types should have the same type as the list contained type") and ran
    eagerly. PyTorch's ``unfold_backward`` writes such an index: fuzzer seed
    400113 under torch.compile (``clamp_`` through an ``unfold`` of a
    ``movedim``)."""
    x0 = torch.arange(24, dtype=torch.float64).reshape(4, 3, 2)
    idx = torch.tensor([2, 0], dtype=torch.int32)
    v = torch.full((4, 2, 2), -1.0, dtype=torch.float64)
    want = x0.clone()
    want[:, idx] = v
    c = Counters()
    x = lazy(x0)
    x[:, lazy(idx)] = lazy(v)
    lm.mark_step()
    assert torch.equal(x.cpu(), want)
    assert c.delta("EagerGraph") == 0 and not c.fell_back()
