"""Writes into an aot graph's inputs (``frontends/aot_writes``): the
optimizer's updates kept in the graph by aot_autograd as ``copy_`` into the
parameters, compiled as results and written into the caller's own tensors
after each call."""
from __future__ import annotations

import copy

import torch
import torch._dynamo
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

import lazy_mlir as lm
from lazy_mlir.compile_service.executable import LOADED
from lazy_mlir.config import current_config
from lazy_mlir.frontends import dynamo
from lazy_mlir.frontends.aot_graph import compile_aot_graph
from lazy_mlir.targets import get_target


def _compiled(fn, *example):
    gm = make_fx(fn, tracing_mode="fake")(*example)  # (aten graph: copy_ on the inputs)
    return compile_aot_graph(gm, list(example), target=get_target("cpu"), config=current_config())


def test_a_write_into_an_input_lands_in_its_memory_and_later_reads_see_it():
    def sgd(p, g):
        p.copy_(p - 0.5 * g)
        return (p * 2,)  # (reads the written value)

    p, g = torch.arange(6.0), torch.ones(6)
    ptr, expect = p.data_ptr(), torch.arange(6.0)
    run = _compiled(sgd, p, g)
    before = lm.metrics.counter_value("DynamoEagerGraph")
    for _ in range(3):  # (the first call learns the module's aliasing)
        expect = expect - 0.5
        (twice,) = run([p, g])
        assert p.data_ptr() == ptr
        torch.testing.assert_close(p, expect)
        torch.testing.assert_close(twice, expect * 2)
    assert lm.metrics.counter_value("DynamoEagerGraph") == before
    assert run.inner.entry.state == LOADED  # (compiled: the module wrote p)


def test_a_converting_write_read_later_runs_the_graph_eagerly():
    def write(x, y):
        x.copy_(y)  # float64 into float32: the later read sees the conversion
        return (x + 1,)

    x, y = torch.zeros(4), torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    run = _compiled(write, x, y)
    before = lm.metrics.counter_value("DynamoEagerGraph")
    (out,) = run([x, y])
    torch.testing.assert_close(x, y.float())
    torch.testing.assert_close(out, y.float() + 1)
    assert lm.metrics.counter_value("DynamoEagerGraph") == before + 1


def test_the_optimizer_updates_the_parameters_in_place_as_eager_does():
    dynamo.register()
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    model = copy.deepcopy(eager)
    ptrs = [p.data_ptr() for p in model.parameters()]
    eopt = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    copt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def step(m, opt, x):
        opt.zero_grad(set_to_none=True)
        loss = m(x).square().mean()
        loss.backward()
        opt.step()
        return loss

    compiled = torch.compile(step, backend="lazy_mlir")
    writes = lm.metrics.counter_value("DynamoInputWrites")
    eager_graphs = lm.metrics.counter_value("DynamoEagerGraph")
    for i in range(4):
        x = torch.randn(3, 6)
        torch.testing.assert_close(compiled(model, copt, x), step(eager, eopt, x))
    # The parameters, both moments and the step counts: written by our backend.
    assert lm.metrics.counter_value("DynamoInputWrites") - writes >= 4 * 4
    assert lm.metrics.counter_value("DynamoEagerGraph") == eager_graphs
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for sa, sb in zip(eopt.state.values(), copt.state.values()):
        for k in sa:
            torch.testing.assert_close(sb[k], sa[k], rtol=1e-4, atol=1e-5)
