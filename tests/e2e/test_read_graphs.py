"""A value read on the host launches the graph that computes it; that graph
also outputs the live tensors it computes anyway and those a few nodes from
it (``lazy/read_outputs.py``), so no later graph computes them again. A loop
that reads a value each step (``generate()``'s check for finished sequences)
kept its state pending: each step's graph recomputed every earlier step (a
tiny GPT-2: 216 nodes for the first token, 1,035 for the sixth) and
compiled anew."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import Counters
from lazy_mlir.lazy import sync
from lazy_mlir.lazy.capture import value_of


def _graph_sizes(monkeypatch) -> list[int]:
    sizes = []
    launch = sync.launch

    def counted(*a, **k):
        out = launch(*a, **k)
        sizes.append(len(out[0].nodes))
        return out
    monkeypatch.setattr(sync, "launch", counted)
    return sizes


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


def test_state_updated_after_the_read_is_computed_by_it(monkeypatch):
    """generate()'s pattern: read a flag, then grow the ids with this step's
    token; the next step reads the ids' last column."""
    sizes = _graph_sizes(monkeypatch)
    ids = torch.tensor([[1, 2]]).to("lazy")
    w = torch.arange(6.0).to("lazy")
    eager_ids = torch.tensor([[1, 2]])
    for _ in range(6):
        tok = (w[ids[:, -1:]] * 3).long() % 5  # the "forward" of the last token
        done = bool((tok == 7).all())  # the read
        ids = torch.cat([ids, tok], dim=1)  # updated after it
        eager_ids = torch.cat([eager_ids, (torch.arange(6.0)[eager_ids[:, -1:]] * 3).long() % 5], 1)
        assert not done
    assert torch.equal(ids.cpu(), eager_ids)
    assert len(set(sizes[1:-1])) == 1, sizes  # each step's graph alike, no growing chain


def test_a_read_leaves_a_far_computation_pending():
    a = torch.ones(3).to("lazy") * 2
    b = torch.ones(3).to("lazy")
    for _ in range(40):  # more nodes than a read takes along
        b = (b * 1.01).sin()
    assert a.sum().item() == 6.0
    assert value_of(a).data is not None and value_of(b).data is None
    lm.mark_step()
    assert value_of(b).data is not None


def test_a_training_loop_without_mark_step_computes_each_step_once(monkeypatch):
    """Its only sync is ``loss.item()`` after ``opt.step()``: the updated
    weights (a few fused nodes from the read's graph) are computed by it.
    They stayed pending, and each step's graph recomputed every earlier
    step: an MLP's grew 139, 161, 183... nodes, one compile a step."""
    sizes = _graph_sizes(monkeypatch)
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU())
              for _ in range(4)]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(8, 1))
    lazy = __import__("copy").deepcopy(model).to("lazy")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (model, lazy)]
    c = Counters()
    for step in range(5):
        x = torch.randn(4, 8)
        losses = []
        for m, opt, dev in ((model, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            loss = m(x.to(dev)).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        assert abs(losses[0] - losses[1]) < 1e-5
    assert len(set(sizes[2:])) == 1, sizes  # (the first step's state is made at its end)
    assert c.delta("UncachedCompile") <= 3
