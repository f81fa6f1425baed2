"""The real-model suite compiles for CUDA (sm_80 and sm_90) without a GPU.

Each model's training step (forward, loss, gradients of every parameter) is
traced with ``lm.jit``, lowered for the cuda target (with its passes:
float32 variance) and compiled by iree-compile to PTX. Nothing runs: that
needs a device (tests/cuda/test_cuda.py). iree-compile 3.13 has no sm_90
description, so ``cuda:sm_90`` compiles PTX for sm_89, which the driver
compiles further for an sm_90 device (``targets._known_sm``).

CI compiles the transformer for sm_80; the rest (sm_90 too) are slow.
"""
from __future__ import annotations

import re

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.pipeline.stages import compile_stages
from lazy_mlir.targets import get_target
from lazy_mlir.tools.real_models import MODEL_NAMES, real_model

pytest.importorskip("transformers")

CI = {("transformer", "sm_80")}  # sm_90 builds sm_89 PTX through the same path: slow


def _step_lowered(name: str, target: str):
    rm = real_model(name, "tiny")
    model = rm.make().to("lazy")
    batch = rm.batch(0)
    keys = list(batch)
    params = list(model.parameters())

    def step(*tensors):
        loss = rm.loss(model, dict(zip(keys, tensors)))
        return (loss, *torch.autograd.grad(loss, params))

    return lm.jit(step).lower(*batch.values(), target=target)


@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_suite_model_compiles_for_cuda(name, sm, request):
    if (name, sm) not in CI and not request.config.getoption("--runslow", default=False):
        pytest.skip("slow: compiled in CI for one model per architecture (--runslow for all)")
    target = get_target(f"cuda:{sm}")
    lowered = _step_lowered(name, f"cuda:{sm}")
    linalg = lowered.stage("linalg", target)
    assert not re.search(r"tensor<[0-9x]*xf64>", linalg.text), "float64 in a float32 model"
    compiled = compile_stages((linalg,), target, lowered.config)
    ptx = {m.decode() for m in re.findall(rb"\.target\s+(sm_\d+a?)", compiled.vmfb)}
    assert ptx == {"sm_89" if sm == "sm_90" else sm}
