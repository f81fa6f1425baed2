"""``copy.deepcopy`` of lazy tensors and models (AveragedModel's EMA copy):
the copy is a tensor of its own that ``mark_step`` computes like any other."""
from __future__ import annotations

import copy

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

import lazy_mlir as lm


def _ema_run(device, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)).to(device)
    ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        model(torch.randn(4, 6, generator=g).to(device)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        ema.update_parameters(model)
        if device == "lazy":
            lm.mark_step()
    return ema


def test_an_ema_copy_is_computed_at_each_mark_step():
    # (the deep copy's storages were deep copies of the original's pending
    # graph that no mark_step knew: every update piled onto one ever longer
    # pending graph, compiled and run again at each read, torch.save included)
    want = _ema_run("cpu", 4)
    got = _ema_run("lazy", 4)
    for p in got.module.parameters():
        assert p._storage.value.data is not None  # computed, nothing pending
    for a, b in zip(got.module.parameters(), want.module.parameters()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-6)


def test_a_deep_copy_keeps_attributes_and_parameters():
    p = torch.nn.Parameter(torch.randn(3, 2).to("lazy"))
    p.tag = {"name": "w"}
    q = copy.deepcopy(p)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.tag == {"name": "w"}
    assert q.tag is not p.tag and q._storage is not p._storage
    with torch.no_grad():
        p.add_(1)
    torch.testing.assert_close(q.cpu() + 1, p.cpu())
