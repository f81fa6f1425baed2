"""Helpers shared by the end-to-end tests of the ``lazy`` device.

Every test compares what the lazy device computes with eager PyTorch on the
CPU. Each distinct graph is compiled by IREE (about half a second), so the
tests use small shapes and try not to build more graphs than they need.
"""
from __future__ import annotations

import torch

import lazy_mlir as lm

LAZY = torch.device("lazy", 0)


def lazy(t: torch.Tensor) -> torch.Tensor:
    """A lazy copy of a CPU tensor."""
    out = t.to("lazy")
    assert out.device == LAZY
    return out


def assert_lazy_close(actual: torch.Tensor, expected: torch.Tensor, **kwargs) -> None:
    """``actual`` is a lazy tensor equal to the eager CPU ``expected``.

    Shape, dtype and strides are checked on the lazy tensor itself (before it
    is synced), then the values after ``.cpu()``.
    """
    assert isinstance(actual, torch.Tensor)
    assert actual.device == LAZY, actual.device
    assert actual.shape == expected.shape
    assert actual.dtype == expected.dtype
    assert actual.stride() == expected.stride(), (actual.stride(), expected.stride())
    host = actual.cpu()
    assert host.device.type == "cpu"
    torch.testing.assert_close(host, expected, **kwargs)


class Counters:
    """Counter deltas since the last ``snapshot()``: ``c.delta("UncachedCompile")``."""

    def __init__(self):
        self.snapshot()

    def snapshot(self) -> "Counters":
        self.start = {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}
        return self

    def delta(self, name: str) -> int:
        return lm.metrics.counter_value(name) - self.start.get(name, 0)

    def fell_back(self) -> list[str]:
        """The ``aten::<op>`` counters (ops run eagerly) that moved."""
        return [n for n in lm.metrics.counter_names() if n.startswith("aten::") and self.delta(n)]


def same_as_eager(fn, *inputs, exact: bool = False, no_fallback: bool = False) -> None:
    """``fn`` on lazy copies of ``inputs`` gives what it gives eagerly (NaN
    where eager has NaN); ``exact``: bit for bit; ``no_fallback``: and no
    aten op ran eagerly."""
    before = {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}
    expected = fn(*[t.clone() for t in inputs])
    actual = fn(*[lazy(t) for t in inputs])
    if isinstance(expected, torch.Tensor):
        expected, actual = [expected], [actual]
    tol = dict(rtol=0, atol=0) if exact else {}
    for a, e in zip(actual, expected):
        assert a.device.type == "lazy" and a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, equal_nan=True, check_stride=False, **tol)
    if no_fallback:
        fell_back = {n: lm.metrics.counter_value(n) - before.get(n, 0)
                     for n in lm.metrics.counter_names() if n.startswith("aten::")}
        assert not any(fell_back.values()), fell_back


def finish_step(loss, opt, device: str) -> float:
    """``loss``'s backward and ``opt``'s step, then ``mark_step`` on the lazy
    device; the loss as a number."""
    loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "lazy":
        lm.mark_step()
    return loss.item()


def train_steps(model, opt, batches, device: str, loss_fn, between=None) -> list[float]:
    """Training steps of ``model`` on ``(x, y)`` host batches moved to
    ``device``, ``loss_fn(model(x), y)``, or ``model(x, y)`` where ``loss_fn``
    is None (a model that computes its own loss); ``mark_step`` after each on
    the lazy device; the losses. ``between(i)``, when given, runs after step ``i``."""
    losses = []
    for i, (x, y) in enumerate(batches):
        opt.zero_grad()
        x, y = x.to(device), y.to(device)
        loss = model(x, y) if loss_fn is None else loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
        if between:
            between(i)
    return losses


def train_classifier(model, opt, batches, device: str, between=None) -> list[float]:
    """``train_steps`` with cross-entropy."""
    import torch.nn.functional as F
    return train_steps(model, opt, batches, device, F.cross_entropy, between)


def assert_trains_like_eager(rm, steps: int = 3) -> Counters:
    """Train ``rm`` (a ``models.real.RealModel``) ``steps`` AdamW steps
    eagerly and on the lazy device side by side: the losses and the final
    weights must be eager's. The counters from before the first step."""
    import pytest
    eager, model = rm.make(), rm.make().to("lazy")
    opt_e, opt_l = rm.optimizer(eager), rm.optimizer(model)
    largest = {n: torch.zeros_like(p) for n, p in eager.named_parameters()}  # |eager grad|
    c = Counters()
    for step in range(steps):
        losses = []
        for m, opt, dev in ((eager, opt_e, "cpu"), (model, opt_l, "lazy")):
            opt.zero_grad(set_to_none=True)
            loss = rm.loss(m, rm.batch(step, dev))
            loss.backward()
            if dev == "cpu":
                for n, p in m.named_parameters():
                    largest[n] = torch.maximum(largest[n], p.grad.abs())
            opt.step()
            if dev == "lazy":
                lm.mark_step()
            losses.append(loss.item())
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for (name, pe), pl in zip(eager.named_parameters(), model.parameters()):
        # Weights whose gradient is only rounding noise (GPT-2's key bias: the
        # softmax ignores it, its gradient is ~1e-11 against ~5e-3) are moved
        # by AdamW a step's size in the noise's direction, either way: compared
        # are the others.
        top = largest[name].max()
        real = largest[name] > 1e-6 * top if top > 0 else torch.ones_like(pe, dtype=torch.bool)
        torch.testing.assert_close(pl.detach().cpu()[real], pe.detach()[real], rtol=1e-4,
                                   atol=1e-5, msg=name)
    return c


def compiled_like_eager(fn, make_inputs, calls: int = 2):
    """``fn`` through ``torch.compile(backend="lazy_mlir")`` gives eager's
    results (and writes eager's values into its arguments), compiled."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()
    torch._dynamo.reset()
    want = fn(*make_inputs())
    c = Counters()
    compiled = torch.compile(fn, backend="lazy_mlir")
    for _ in range(calls):  # (the first call may run eagerly while compiling)
        got = compiled(*make_inputs())
        assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)
    assert c.delta("DynamoEagerGraph") == 0


def captured_backward_graph(monkeypatch):
    """The largest graph ``mark_step`` builds for a linear + gelu forward
    and backward (a backward subgraph among its nodes), as the compile path
    receives it."""
    from lazy_mlir.graph.program import Graph
    captured = []
    original = Graph.build

    def keep(*args, **kwargs):
        captured.append(original(*args, **kwargs))
        return captured[-1]
    monkeypatch.setattr(Graph, "build", staticmethod(keep))
    lin = torch.nn.Linear(4, 3).to("lazy")
    torch.nn.functional.gelu(lin(lazy(torch.randn(2, 4)))).sum().backward()
    lm.mark_step()
    monkeypatch.undo()
    return max(captured, key=lambda g: len(g.nodes))


def compiles_once_over_numbers(fn, x: torch.Tensor, exact: bool = False, steps: int = 4) -> None:
    """``fn(x, t)`` for a new Python number ``t`` each step gives eager's
    values (``exact``: bit for bit, NaN where eager's) and compiles nothing
    after the first step: ``t`` is a graph input, not a constant."""
    xl = lazy(x)
    lm.mark_step()
    for step in range(steps):
        if step == 1:
            c = Counters()
        t = 0.35 + 0.1 * step
        got = fn(xl, t)
        lm.mark_step()
        tol = dict(rtol=0, atol=0, equal_nan=True) if exact else {}
        torch.testing.assert_close(got.cpu(), fn(x, t), **tol)
    assert c.delta("UncachedCompile") + c.delta("PersistentCacheHit") == 0
