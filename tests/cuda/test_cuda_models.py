"""The real-model suite compiles for CUDA (sm_80 and sm_90) without a GPU.

Each model's training step (forward, loss, gradients of every parameter) is
traced with ``lm.jit`` and lowered once for the cuda target (with its
passes: float32 variance); the same linalg IR is then compiled by
iree-compile to PTX for both architectures (lowering reads only the target's
name, never its SM). Nothing runs: that needs a device
(tests/cuda/test_cuda.py). iree-compile 3.13 has no sm_90 description, so
``cuda:sm_90`` compiles PTX for sm_89, which the driver compiles further for
an sm_90 device (``targets._known_sm``).

CI compiles GPT-2 (attention) and ResNet (convolutions, batch norm); the
others are marked slow (``--runslow``): the six took 247 s of CPU on the
shared 2-core Zen 4 machine, ~1/7 of the whole suite's wall time (lowering
0.5-10 s of CPU per model, each iree-compile 5-35 s; the LSTM's unrolled
3,511-node step, 141 kernels: 73 s).
"""
from __future__ import annotations

import re

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.pipeline.stages import compile_stages
from lazy_mlir.targets import get_target
from lazy_mlir.models.real import MODEL_NAMES, real_model

pytest.importorskip("transformers")

ARCHS = {"sm_80": "sm_80", "sm_90": "sm_89"}  # asked for -> PTX .target


def _step_lowered(name: str):
    rm = real_model(name, "tiny")
    model = rm.make().to("lazy")
    batch = rm.batch(0)
    keys = list(batch)
    params = list(model.parameters())

    def step(*tensors):
        loss = rm.loss(model, dict(zip(keys, tensors)))
        return (loss, *torch.autograd.grad(loss, params))

    return lm.jit(step).lower(*batch.values(), target="cuda:sm_80")


IN_CI = ("resnet",)  # (gpt2, 34 s in CI, with --runslow)


@pytest.mark.parametrize("name", [n if n in IN_CI else pytest.param(n, marks=pytest.mark.slow)
                                  for n in MODEL_NAMES])
def test_suite_model_compiles_for_cuda(name):
    lowered = _step_lowered(name)
    linalg = lowered.stage("linalg")
    assert not re.search(r"tensor<[0-9x]*xf64>", linalg.text), "float64 in a float32 model"
    for sm, ptx_sm in ARCHS.items():
        target = get_target(f"cuda:{sm}")
        compiled = compile_stages((linalg,), target, lowered.config)
        ptx = {m.decode() for m in re.findall(rb"\.target\s+(sm_\d+a?)", compiled.vmfb)}
        assert ptx == {ptx_sm}, (sm, ptx)
        assert len(re.findall(rb"\.entry\s", compiled.vmfb)) > 10  # the step's kernels
