"""A view captured on eager's strides compiles where the import re-trace's
decompositions give its input other strides (``ops/restride.py``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def _layer_norm_then_view(x, w, b):
    # layer_norm's CPU kernel returns a contiguous tensor (the view is valid
    # at capture); its decomposition keeps the permuted input's strides
    y = F.layer_norm(x.permute(0, 2, 3, 1), (8,), w, b)
    return y.view(-1, 8) * 2, torch.ops.aten._unsafe_view(y, [2, 16, 8]).sum(1)


def test_views_after_a_restriding_decomposition_compile(counters):
    x, w, b = torch.randn(2, 8, 4, 4), torch.randn(8), torch.randn(8)
    counters.snapshot()
    outs = _layer_norm_then_view(lazy(x), lazy(w), lazy(b))
    lm.mark_step()
    for out, expected in zip(outs, _layer_norm_then_view(x, w, b)):
        assert_lazy_close(out, expected, rtol=1e-5, atol=1e-5)
    assert counters.delta("UncachedCompile") == 1
    assert not counters.fell_back(), counters.fell_back()
