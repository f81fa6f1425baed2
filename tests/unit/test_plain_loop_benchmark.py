"""benchmarks/plain_loop.py's per-eager-op column counts the aten ops an
eager step runs: the fixed denominator of the host cost per op."""
from __future__ import annotations

import torch

from lazy_mlir.models.real import real_model


def test_every_aten_op_is_counted_once(load_benchmark):
    mod = load_benchmark("plain_loop")
    with mod._CountOps() as counter:
        x = torch.ones(3)
        (x + 1).sum()
    assert counter.ops == 3  # ones, add, sum


def test_an_eager_step_runs_more_aten_ops_than_its_forward(load_benchmark):
    mod = load_benchmark("plain_loop")
    rm = real_model("lstm", "tiny")
    model = rm.make()
    batch = rm.batch(0, "cpu")
    with mod._CountOps() as counter:
        rm.loss(model, batch)
    forward = counter.ops
    step = mod.eager_ops_per_step(rm)
    assert forward > 0
    assert step > forward  # backward and the optimizer's update run too
    assert mod.eager_ops_per_step(rm) == step
