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


def test_scatter_into_a_view_leaves_its_input_alone():
    """An accumulating ``index_put_`` through an ``unsqueeze`` view, read by
    ``.item()`` (one graph) and then used again (the next graph recomputes
    it from the input): from the second step on the first module added into
    the input's memory, so the second added again (fuzzer corpus seed 126,
    silent: every value off by the update)."""
    def program(v0):
        v0.unsqueeze(2).index_put_((torch.tensor([0], device=v0.device),),
                                   torch.ones((1, 3, 1, 4), device=v0.device), accumulate=True)
        return v0, v0 + v0.flatten()[0].item()
    for step in range(3):  # (the first call runs on copies)
        x0 = torch.arange(24.0).reshape(2, 3, 4)
        want = program(x0.clone())
        got = program(lazy(x0))
        lm.mark_step()
        for g, w in zip(got, want):
            assert torch.equal(g.cpu(), w), f"step {step}"
