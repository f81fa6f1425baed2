"""A backward recorded as one ``subgraph`` node holds no in-place op, also
where a formula runs below functionalization (SiLU's backward recorded
``empty_like``, ``fill_``, ``sub_``: torch-mlir refused the ``copy_`` they
became and every graph of a Llama step ran eagerly)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.ops import subgraph
from e2e_helpers import lazy


def _step(x, w):
    loss = F.silu(x @ w).sum()
    loss.backward()
    return loss


def test_silu_backward_compiles_as_a_functional_template(counters):
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    w_eager = w.clone().requires_grad_()
    _step(x, w_eager)
    w_lazy = lazy(w).requires_grad_()
    counters.snapshot()
    _step(lazy(x), w_lazy)
    lm.mark_step()
    torch.testing.assert_close(w_lazy.grad.cpu(), w_eager.grad, rtol=1e-5, atol=1e-5)
    assert not counters.fell_back(), counters.fell_back()
    for template in subgraph.TEMPLATES.values():
        assert not [n for n in template.gm.graph.nodes if subgraph._mutates(n)], template.gm.code
