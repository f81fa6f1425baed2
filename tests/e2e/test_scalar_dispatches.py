"""Many independent scalar results in one graph load and run compiled
(``passes/scalar_dispatches.py``): IREE fused them all into one dispatch
with a binding per result, over its runtime's 32, and the module could not
be loaded (a tiny BERT's step with ``clip_grad_norm_``: 41 gradients' norms,
``hal/module.c:1106 OUT_OF_RANGE``, the whole step ran eagerly)."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def test_norms_of_forty_tensors_load_and_run_compiled(counters):
    ts = [torch.randn(4, 2 + i, generator=torch.Generator().manual_seed(i)) for i in range(40)]
    counters.snapshot()
    total = torch.nn.utils.get_total_norm([lazy(t) for t in ts])  # clip_grad_norm_'s norm
    lm.mark_step()
    assert counters.delta("ModuleLoadFailed") == 0
    assert not counters.fell_back(), counters.fell_back()
    assert_lazy_close(total, torch.nn.utils.get_total_norm(ts), rtol=1e-5, atol=1e-5)

