"""One model of the sweep: how to build it, feed it and take its loss."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn


@dataclass(frozen=True)
class Entry:
    """``make()``: the model, weights drawn from ``torch.manual_seed(0)``;
    ``batch(step)``: the step's CPU inputs (a dict of keyword arguments);
    ``loss(model, batch)``: forward and loss. ``family``: the group the
    report counts it in (``causal-lm``, ``image-classification``, ``nn``...)."""

    name: str
    family: str
    make: Callable[[], nn.Module]
    batch: Callable[[int], dict]
    loss: Callable[[nn.Module, dict], torch.Tensor]


def seeded(build: Callable[[], nn.Module], seed: int = 0) -> Callable[[], nn.Module]:
    """``build`` with torch's, numpy's and Python's random streams seeded:
    models draw from all three while training (wav2vec2's time masks: numpy)."""
    def make():
        import random

        import numpy as np
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        model = build()
        if os.environ.get("LAZY_MLIR_SWEEP_NO_DROPOUT"):  # (a mismatch checked without RNG)
            for module in model.modules():
                if isinstance(module, nn.modules.dropout._DropoutNd):
                    module.p = 0.0
                elif isinstance(module, nn.MultiheadAttention):
                    module.dropout = 0.0  # (a float, no Dropout module: attention weights')
        return model
    return make


def generator(step: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + step)
