"""Every random number a lazy tensor gets comes from PyTorch's CPU generator,
in eager's order, step after step. torch-mlir lowers ``randn_like``,
``rand_like``, ``bernoulli`` and ``multinomial`` with a generator of its own
that ``torch.manual_seed`` does not reach: compiled, they gave the same noise
every step and left the CPU generator behind eager's (wrong values, no
warning). They are fills drawn on the host now (``ops/random_fills.py``), or
run eagerly (counted)."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import Counters


def _draws(device, step_op, steps=3):
    torch.manual_seed(0)
    x = torch.linspace(0.05, 0.95, 12, device=device).reshape(3, 4)
    outs = []
    for _ in range(steps):
        outs.append(step_op(x) * 2 + 1)  # (in a graph with other ops)
        if device == "lazy":
            lm.mark_step()
        outs[-1] = outs[-1].cpu()
    return outs, torch.rand(2)  # the generator's state after the steps


_COMPILED = {
    "randn_like": lambda x: torch.randn_like(x),
    "randn_like_transposed": lambda x: torch.randn_like(x.t()),
    "rand_like_float64": lambda x: torch.rand_like(x, dtype=torch.float64),
    "bernoulli_of_probabilities": lambda x: torch.bernoulli(x),
    "bernoulli_of_float64_probabilities": lambda x: torch.bernoulli(x.double()),
    "bernoulli_p": lambda x: torch.bernoulli(x, 0.3),
    "bernoulli_in_place_lazy_p": lambda x: torch.empty_like(x).bernoulli_(x),
    "bernoulli_in_place_transposed": lambda x: torch.empty_like(x.t()).bernoulli_(x.t() * 0.5),
    "uniform_functional": lambda x: torch.ops.aten.uniform(x, -2.0, 3.0),
    # ATen's draw: exponential_ and an argmax (lazy/multinomial.py)
    "multinomial_without_replacement": lambda x: torch.multinomial(x, 4).float(),
    "multinomial_of_one": lambda x: torch.multinomial(x, 1, True).float(),
}


@pytest.mark.parametrize("name", list(_COMPILED))
def test_random_ops_draw_eagers_numbers_every_step(name):
    eager, eager_after = _draws("cpu", _COMPILED[name])
    c = Counters()
    lazy, lazy_after = _draws("lazy", _COMPILED[name])
    for step, (a, b) in enumerate(zip(lazy, eager)):
        assert torch.equal(a, b), f"step {step}: {a} != {b}"
    assert not torch.equal(lazy[0], lazy[1])  # new noise each step
    assert torch.equal(lazy_after, eager_after)  # the generator left where eager leaves it
    assert c.fell_back() == [] and c.delta("EagerGraph") == 0  # compiled


@pytest.mark.parametrize("name,op", [
    ("multinomial", lambda x: torch.multinomial(x, 2, True).float()),  # (with replacement)
    ("rrelu", lambda x: torch.nn.functional.rrelu(x - 0.5, training=True)),
    ("poisson", lambda x: torch.poisson(x * 4)),
])
def test_random_ops_without_a_fill_run_eagerly_with_eagers_numbers(name, op):
    eager, eager_after = _draws("cpu", op)
    c = Counters()
    lazy, lazy_after = _draws("lazy", op)
    for a, b in zip(lazy, eager):
        assert torch.equal(a, b)
    assert torch.equal(lazy_after, eager_after)
    assert c.fell_back()  # counted


def test_bernoulli_of_lazy_probabilities_reads_nothing_to_the_host():
    x = torch.linspace(0.05, 0.95, 12, device="lazy").reshape(3, 4)
    lm.mark_step()
    c = Counters()
    y = torch.empty_like(x).bernoulli_(x) + torch.bernoulli(x)
    lm.mark_step()
    assert c.delta("TransferFromDevice") == 0 and c.fell_back() == []
    assert y.cpu().shape == (3, 4)
