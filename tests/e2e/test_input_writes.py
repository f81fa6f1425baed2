"""A module never writes into an input that is still alive.

IREE writes an ``insert_slice`` into the tensor it updates when that is the
tensor's last use; a ``clone`` of device data folds away, so the write lands
in the input's buffer: on the cpu target, zero-copy, the input's imported
host memory (``pipeline/in_place.clobbered_args``). Issue 54 class: silent.
"""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import lazy


def _step(d, t):
    y = d.clone()
    y[6:9] = t
    y[:, 1:][6] *= -1
    return y


def test_clone_written_by_slices_leaves_its_input_alone():
    g = torch.Generator().manual_seed(0)
    d0, t0 = torch.randn(10, 4, generator=g), torch.randn(3, 4, generator=g)
    d = lazy(d0)
    lm.mark_step()  # device data: imported host memory
    t = lazy(t0)
    want = _step(d0.clone(), t0)
    for step in range(4):  # the first call runs on copies; later ones do not
        y = _step(d, t)
        lm.mark_step()
        assert torch.equal(d.cpu(), d0), f"step {step}: the module wrote into d"
        assert torch.equal(y.cpu(), want), f"step {step}"
