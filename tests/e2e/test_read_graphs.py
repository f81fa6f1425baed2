"""A value read on the host launches the graph that computes it; the live
tensors that graph computes anyway become its outputs too (``sync.
_computed_anyway``), so no later graph computes them again. A loop that
reads a value each step (``generate()``'s check for finished sequences)
kept its cache pending: each step's graph recomputed every earlier step
(216 nodes for a tiny GPT-2's first token, 1,035 for the sixth) and
compiled anew."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import Counters
from lazy_mlir.lazy.capture import value_of


def test_a_loop_reading_a_value_each_step_computes_each_step_once():
    c = Counters()
    x = torch.arange(4.0).to("lazy")  # (data: a graph of constants is computed on the host)
    cache = torch.zeros(4).to("lazy")
    sums = []
    for _ in range(6):
        cache = torch.cat([cache[1:], (cache[-1:] + x[:1] + 1).tanh()])  # grows nothing
        sums.append((cache * 2).sum().item())
        assert value_of(cache).data is not None  # computed by the read, not left pending
    want = torch.zeros(4)
    for s in sums:
        want = torch.cat([want[1:], (want[-1:] + 1).tanh()])
        assert abs((want * 2).sum().item() - s) < 1e-5
    assert c.delta("UncachedCompile") <= 2  # (every step's graph is the same)


def test_a_read_leaves_what_it_does_not_compute_pending():
    a = torch.ones(3).to("lazy") * 2
    b = torch.ones(3).to("lazy") * 3
    assert a.sum().item() == 6.0
    assert value_of(a).data is not None and value_of(b).data is None
    lm.mark_step()
    assert value_of(b).data is not None
