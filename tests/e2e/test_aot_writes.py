"""Writes into an aot graph's inputs (``frontends/aot_writes``): the
optimizer's updates kept in the graph by aot_autograd as ``copy_`` into the
parameters, compiled as results and written into the caller's own tensors
after each call."""
from __future__ import annotations

import copy
import io
import sys

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


def _adamw_step(m, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = m(x).square().mean()
    loss.backward()
    opt.step()
    return loss


def _assert_trained_alike(eager, model, eopt, copt):
    """The parameters and the optimizer states of ``model`` are eager's."""
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5)
    for sa, sb in zip(eopt.state.values(), copt.state.values()):
        for k in sa:
            torch.testing.assert_close(sb[k], sa[k], rtol=1e-4, atol=1e-5)


def test_the_optimizer_updates_the_parameters_in_place_as_eager_does():
    dynamo.register()
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 2))
    model = copy.deepcopy(eager)
    ptrs = [p.data_ptr() for p in model.parameters()]
    eopt = torch.optim.AdamW(eager.parameters(), lr=1e-2)
    copt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    compiled = torch.compile(_adamw_step, backend="lazy_mlir")
    writes = lm.metrics.counter_value("DynamoInputWrites")
    eager_graphs = lm.metrics.counter_value("DynamoEagerGraph")
    for i in range(4):
        x = torch.randn(3, 6)
        torch.testing.assert_close(compiled(model, copt, x), _adamw_step(eager, eopt, x))
    # The parameters, both moments and the step counts: written by our backend.
    assert lm.metrics.counter_value("DynamoInputWrites") - writes >= 4 * 4
    assert lm.metrics.counter_value("DynamoEagerGraph") == eager_graphs
    assert [p.data_ptr() for p in model.parameters()] == ptrs
    _assert_trained_alike(eager, model, eopt, copt)


def _big_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 128), nn.Linear(128, 128))


def test_large_updates_take_over_the_results_memory_unless_shared():
    """A weight of 64 KB and the moments of 64 and 128 KB take the module's
    results' memory instead of a copy; a weight that a held ``detach()``
    and a view share and one in shared memory are copied into, as are
    small tensors: each sees eager's values."""
    dynamo.register()
    torch._dynamo.reset()
    eager = _big_model()
    model = copy.deepcopy(eager)
    model[2].weight.share_memory_()  # (another process could read it: Hogwild)
    held = model[0].weight.detach()  # (an alias the user keeps)
    view = model[0].bias[:8]  # (small: copied whatever)
    shared_ptr, last_ptr = model[2].weight.data_ptr(), model[3].weight.data_ptr()
    first = model[3].weight.untyped_storage()  # (its memory: no one keeps it after)
    eopt = torch.optim.AdamW(eager.parameters(), lr=1e-3)
    copt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    compiled = torch.compile(_adamw_step, backend="lazy_mlir")
    taken = lm.metrics.counter_value("DynamoWritesTakenOver")
    for _ in range(4):
        x = torch.randn(16, 128)
        torch.testing.assert_close(compiled(model, copt, x), _adamw_step(eager, eopt, x))
    _assert_trained_alike(eager, model, eopt, copt)
    assert torch.equal(held, model[0].weight) and torch.equal(view, model[0].bias[:8])
    assert model[2].weight.data_ptr() == shared_ptr and model[2].weight.is_shared()
    assert model[3].weight.data_ptr() != last_ptr  # (taken over)
    assert sys.getrefcount(first) == 2  # (``first`` and the call's argument)
    saved = io.BytesIO()  # (memory taken over saves, loads and copies as any)
    torch.save(model.state_dict(), saved)
    saved.seek(0)
    for a, b in zip(torch.load(saved).values(), copy.deepcopy(model).state_dict().values()):
        assert torch.equal(a, b)
    # At each step: the last weight and its moments, the other weights' moments.
    step = 3 * 64 * 1024 + 4 * 128 * 1024
    assert lm.metrics.counter_value("DynamoWritesTakenOver") - taken == 4 * step


def test_results_over_one_memory_are_not_taken_over():
    """Two results the module answers with one buffer: neither input takes
    it over (DLPack's aliases are invisible to use counts)."""
    def twice(a, b, g):
        new = a - g
        a.copy_(new)
        b.copy_(new)
        return (new.sum(),)

    a, b, g = torch.zeros(64, 512), torch.zeros(64, 512), torch.ones(64, 512)
    run = _compiled(twice, a, b, g)
    for step in range(1, 4):
        run([a, b, g])
        assert a.data_ptr() != b.data_ptr()
        torch.testing.assert_close(a, torch.full_like(a, -step))
        torch.testing.assert_close(b, torch.full_like(b, -step))
