"""benchmarks/plain_loop.py's per-eager-op column counts the aten ops an
eager step runs: the fixed denominator of the host cost per op."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from lazy_mlir.tools.real_models import real_model

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "plain_loop.py"


def _plain_loop():
    spec = importlib.util.spec_from_file_location("_plain_loop_under_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_aten_op_is_counted_once():
    mod = _plain_loop()
    with mod._CountOps() as counter:
        x = torch.ones(3)
        (x + 1).sum()
    assert counter.ops == 3  # ones, add, sum


def test_an_eager_step_runs_more_aten_ops_than_its_forward():
    mod = _plain_loop()
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
