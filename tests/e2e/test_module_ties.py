"""Tied weights stay tied through ``model.to("lazy")`` and back
(lazy/module_ties.py), and train as in eager."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm


def _tied(seed=0):
    torch.manual_seed(seed)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                      nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))
    m[4].weight = m[2].weight
    m[6].register_buffer("scale", torch.ones(10))
    m[0].register_buffer("scale", m[6].scale)  # a shared buffer too
    return m


def test_to_lazy_and_back_keeps_shared_parameters_and_buffers():
    m = _tied()
    n_params = len(list(m.parameters()))
    m.to("lazy")
    assert m[4].weight is m[2].weight and isinstance(m[2].weight, nn.Parameter)
    assert m[0].scale is m[6].scale
    assert len(list(m.parameters())) == n_params
    m.cpu()
    assert m[4].weight is m[2].weight and m[2].weight.device.type == "cpu"
    assert m[0].scale is m[6].scale


def test_untied_layers_stay_separate():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)).to("lazy")
    assert m[0].weight is not m[1].weight and len(list(m.parameters())) == 4


def test_a_tied_model_trains_as_in_eager():
    torch.manual_seed(1)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    eager, lazy = _tied(), _tied().to("lazy")
    eopt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lopt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    for _ in range(4):
        for model, opt, xs, ys in ((eager, eopt, x, y), (lazy, lopt, x.to("lazy"), y.to("lazy"))):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xs), ys).backward()
            opt.step()
        lm.mark_step()
    for p, q in zip(lazy.parameters(), eager.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)


def test_an_optimizer_made_before_the_move_trains_the_moved_model():
    # pygcn: optimizer = Adam(model.parameters()); then model.cuda(). On cuda
    # the Parameters are kept (param.data =); the lazy move made new ones and
    # the optimizer updated the old CPU weights: the loss never moved.
    torch.manual_seed(2)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    eager, lazy = _tied(), _tied()
    eopt = torch.optim.Adam(eager.parameters(), lr=0.01, weight_decay=5e-4)
    lopt = torch.optim.Adam(lazy.parameters(), lr=0.01, weight_decay=5e-4)
    before = list(lazy.parameters())
    lazy.to("lazy")
    assert all(p is q for p, q in zip(lazy.parameters(), before))
    assert all(isinstance(p, nn.Parameter) and p.device.type == "lazy" for p in before)
    losses = {"eager": [], "lazy": []}
    for _ in range(3):
        for name, model, opt, xs, ys in (("eager", eager, eopt, x, y),
                                          ("lazy", lazy, lopt, x.to("lazy"), y.to("lazy"))):
            opt.zero_grad()
            loss = F.cross_entropy(model(xs), ys)
            loss.backward()
            opt.step()
            lm.mark_step()
            losses[name].append(loss.item())
    torch.testing.assert_close(losses["lazy"], losses["eager"], rtol=1e-5, atol=1e-6)
    assert losses["lazy"][2] < losses["lazy"][0]
    lazy.cpu()  # and back: still the optimizer's objects
    assert all(p is q and p.device.type == "cpu" for p, q in zip(lazy.parameters(), before))
