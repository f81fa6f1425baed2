"""``loss.backward()`` on lazy tensors as one ``lazy_mlir::subgraph`` node
(``lazy/backward.py``, through PyTorch's compiled autograd), compared with
eager PyTorch: gradients, accumulation, hooks and the cases that run op by
op."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lazy_mlir as lm


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 3))


def _data(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(5, 6, generator=g), torch.randint(0, 3, (5,), generator=g)


def _train(device, steps=3, micro=1, hook=None, retain=False):
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    if hook is not None:
        model[0].weight.register_hook(lambda g: seen.append(1) or g * 2)
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for m in range(micro):
            x, y = (t.to(device) for t in _data(step * micro + m))
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward(retain_graph=retain)
            if retain:
                loss.backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    grads = [p.grad.cpu() for p in model.parameters()]
    return losses, grads, [p.detach().cpu() for p in model.parameters()], seen


def _same_as_eager(**kw):
    lm.metrics.reset()
    got = _train("lazy", **kw)
    want = _train("cpu", **kw)
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for a, b in zip(got[1] + got[2], want[1] + want[2]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert len(got[3]) == len(want[3])
    return {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}


def test_backward_is_one_node_and_trains_like_eager():
    counts = _same_as_eager()
    assert counts.get("backward::one_node") == 3 and "backward::ops" not in counts
    # no op of the backward was recorded on its own
    assert not [n for n in counts if n.startswith("lazy::") and "backward" in n], counts
    assert counts.get("lazy::subgraph") == 3


def test_accumulated_gradients_add_into_grad():
    counts = _same_as_eager(micro=2)
    assert counts.get("backward::one_node") == 6


def test_retained_graph_backward_twice():
    counts = _same_as_eager(retain=True)
    assert counts.get("backward::one_node") == 6


def test_a_tensor_hook_keeps_autograds_own_engine():
    counts = _same_as_eager(hook=True)
    assert "backward::ops" not in counts and "backward::one_node" not in counts


def test_a_retained_gradient_of_an_intermediate_is_its_value():
    """``h.retain_grad()`` (a tutorial's look at an activation's gradient) is
    a hook autograd runs: through the traced one-node backward it kept the
    trace's fake gradient (``h.grad.cpu()`` was a FakeTensor)."""
    got = {}
    for device in ("lazy", "cpu"):
        model = _model().to(device)
        x, y = (t.to(device) for t in _data(0))
        h = model[0](x)
        h.retain_grad()
        nn.functional.cross_entropy(model[1:](h), y).backward()
        got[device] = (h.grad.cpu(), model[0].weight.grad.cpu())
    assert type(got["lazy"][0]) is torch.Tensor
    for a, b in zip(got["lazy"], got["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_a_module_backward_hook_runs_the_backward_op_by_op():
    """A module's full backward hook is an autograd Function of PyTorch's in
    the graph: compiled autograd runs it, op by op."""
    calls = []
    results = []
    for device in ("lazy", "cpu"):
        lm.metrics.reset()
        model = _model().to(device)
        model[2].register_full_backward_hook(lambda m, gi, go: calls.append(device))
        x, y = (t.to(device) for t in _data(0))
        nn.functional.cross_entropy(model(x), y).backward()
        results.append([p.grad.cpu() for p in model.parameters()])
        if device == "lazy":
            assert lm.metrics.counter_value("backward::ops") == 1
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert calls == ["lazy", "cpu"]


def test_a_custom_autograd_function_runs_op_by_op():
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    grads = []
    lm.metrics.reset()
    for device in ("lazy", "cpu"):
        w = torch.linspace(-1, 1, 7, device=device, requires_grad=True)
        Square.apply(w).sum().backward()
        grads.append(w.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1])
    assert lm.metrics.counter_value("backward::ops") == 1


def test_a_transposed_gradient_lands_in_grad_laid_out_as_the_parameter():
    """AccumulateGrad copies a gradient whose layout differs from the
    parameter's into a new contiguous ``.grad``: the copy must take that
    layout, or a later view of ``.grad`` (DDP's buckets flatten it) was
    inferred on the transposed value and raised."""
    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, w):
            return w * 2

        @staticmethod
        def backward(ctx, g):
            return (g * 2).t().contiguous().t()  # right values, column-major

    flat = []
    for device in ("lazy", "cpu"):
        w = torch.arange(6.0).reshape(2, 3).to(device).requires_grad_()
        Double.apply(w).sin().sum().backward()
        assert w.grad.is_contiguous()
        flat.append((w.grad.view(-1) + 1).cpu())
    torch.testing.assert_close(flat[0], flat[1])


def test_create_graph_keeps_autograds_own_path():
    grads = []
    for device in ("lazy", "cpu"):
        x = torch.linspace(-1, 1, 5, device=device, requires_grad=True)
        (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1])


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_BACKWARD", "ops")
    counts = _same_as_eager(steps=2)
    assert "backward::one_node" not in counts and "backward::ops" not in counts


def test_the_graph_is_the_same_every_step():
    """One template per backward structure: no compile after step 1."""
    model = _model().to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    compiles = []
    for step in range(5):
        opt.zero_grad(set_to_none=True)
        x, y = (t.to("lazy") for t in _data(step))
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        lm.mark_step()
        compiles.append(lm.metrics.counter_value("UncachedCompile"))
    assert compiles[1] == compiles[-1], compiles


@pytest.mark.parametrize("wrapped", [0.5, 2.0])
def test_python_numbers_saved_by_a_formula_are_inputs(wrapped):
    """``x * 0.5`` saves 0.5 as a 0-dim host tensor: lifted as an input, so
    another number is another input value, not another graph."""
    grads = []
    lm.metrics.reset()
    for device in ("lazy", "cpu"):
        x = torch.linspace(-1, 1, 5, device=device, requires_grad=True)
        (torch.tanh(x) * wrapped).sum().backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[0], grads[1])
    assert lm.metrics.counter_value("backward::one_node") == 1


def test_the_backward_compares_no_tensor(monkeypatch):
    """Looking for a tensor that could not be lifted must not compare the
    backward's inputs with ``==`` (``None in tensors`` called ``Tensor.__eq__``
    on each of them: ~13 us apiece, 1.1 ms of GPT-2 tiny's 2.3 ms backward)."""
    from lazy_mlir.lazy.tensor import LazyTensor

    def refuse(self, other):
        raise AssertionError("a tensor was compared with ==")

    monkeypatch.setattr(LazyTensor, "__eq__", refuse, raising=False)
    counts = _same_as_eager(steps=2)
    assert counts.get("backward::one_node") == 2


class _LengthLM(nn.Module):
    """Sizes of this test's own (no module of another test is reused)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(29, 20)
        self.mix = nn.Linear(20, 20)
        self.out = nn.Linear(20, 29)

    def forward(self, ids):
        h = torch.tanh(self.mix(self.embed(ids)))
        b, t, d = h.shape
        return self.out(h.reshape(b * t, d)).view(b, t, -1)


def test_new_lengths_reuse_the_backward_template(monkeypatch):
    """A new sequence length makes the backward's template from the one
    traced with symbolic sizes (``ops/subgraph_sizes.py``), not a new trace:
    compiled autograd's graph of the first length and its graph of dynamic
    sizes are traced once each, whatever the number of lengths; gradients
    are eager's at every length."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    lengths = (9, 13, 6, 17, 11)
    grads = {}
    lm.metrics.reset()
    for device in ("lazy", "cpu"):
        torch.manual_seed(0)
        model = _LengthLM().to(device)
        g = torch.Generator().manual_seed(1)
        grads[device] = []
        for t in lengths:
            ids = torch.randint(0, 29, (3, t), generator=g).to(device)
            model.zero_grad(set_to_none=True)
            logits = model(ids)
            nn.functional.cross_entropy(logits.reshape(-1, 29), ids.reshape(-1)).backward()
            if device == "lazy":
                lm.mark_step()
            grads[device].append([p.grad.cpu() for p in model.parameters()])
    for got, want in zip(grads["lazy"], grads["cpu"]):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert lm.metrics.counter_value("backward::one_node") == len(lengths)
    assert lm.metrics.counter_value("backward::traced") == 2
    assert lm.metrics.counter_value("backward::resized") == len(lengths) - 2


def test_saved_tensors_of_new_sizes_under_the_same_saved_sizes_trace_again():
    """Compiled autograd reuses its graph of an EmbeddingBag's backward for
    another number of indices (no saved size changed, only the saved
    tensors'); the template traced at the first count held it (``arange(94)``)
    and the graph at the next count failed to compile ("The size of tensor
    a (94) must match ... (106)"). The inputs' shapes are part of the
    template's key now."""
    grads = {}
    lm.metrics.reset()
    for device in ("lazy", "cpu"):
        torch.manual_seed(0)
        bag = nn.EmbeddingBag(50, 8, mode="sum").to(device)
        grads[device] = []
        for n in (94, 106, 94, 80):
            g = torch.Generator().manual_seed(n)
            idx = torch.randint(0, 50, (n,), generator=g).to(device)
            offsets = torch.tensor([0, n // 3, n // 2], device=device)
            weights = torch.rand(n, generator=g).to(device)
            bag(idx, offsets, per_sample_weights=weights).pow(2).sum().backward()
            grads[device].append(bag.weight.grad.cpu())
            bag.weight.grad = None
            if device == "lazy":
                lm.mark_step()
    for a, b in zip(grads["lazy"], grads["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert lm.metrics.counter_value("EagerGraph") == 0
    assert lm.metrics.counter_value("backward::one_node") == 4
