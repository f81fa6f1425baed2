"""Packed sequences on the lazy device (``lazy/packed.py``):
``pack_padded_sequence`` with host lengths (as on CUDA), a packed GRU and
``pad_packed_sequence``, forward and backward, equal to eager; eager's
errors for bad lengths."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def _packed_gru(gru, x, lengths):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, h = gru(packed)
    padded, out_lengths = pad_packed_sequence(out, batch_first=True)
    return padded, h, out_lengths


def test_a_packed_gru_trains_like_eager(counters):
    torch.manual_seed(0)
    gru, x, lengths = nn.GRU(3, 4, batch_first=True), torch.randn(3, 4, 3), torch.tensor([2, 4, 1])
    xe = x.clone().requires_grad_()
    padded, h, out_lengths = _packed_gru(gru, xe, lengths)
    (padded.sum() + h.square().sum()).backward()

    moved = nn.GRU(3, 4, batch_first=True)
    moved.load_state_dict(gru.state_dict())
    moved.to("lazy")
    xl = lazy(x).requires_grad_()
    counters.snapshot()
    padded_l, h_l, out_lengths_l = _packed_gru(moved, xl, lengths)
    (padded_l.sum() + h_l.square().sum()).backward()
    lm.mark_step()
    assert out_lengths_l.device.type == "cpu" and out_lengths_l.tolist() == out_lengths.tolist()
    assert_lazy_close(padded_l, padded, rtol=1e-5, atol=1e-6)
    assert_lazy_close(h_l, h, rtol=1e-5, atol=1e-6)
    assert_lazy_close(xl.grad, xe.grad, rtol=1e-5, atol=1e-6)
    for p, q in zip(moved.parameters(), gru.parameters()):
        assert_lazy_close(p.grad, q.grad, rtol=1e-4, atol=1e-6)
    assert not counters.fell_back(), counters.fell_back()


def test_packing_keeps_batch_sizes_on_the_host():
    x = torch.randn(5, 3, 2)  # time-major
    data, batch_sizes = torch.ops.aten._pack_padded_sequence(lazy(x), torch.tensor([5, 3, 3]),
                                                             False)
    want, want_sizes = torch.ops.aten._pack_padded_sequence(x, torch.tensor([5, 3, 3]), False)
    assert batch_sizes.device.type == "cpu" and batch_sizes.tolist() == want_sizes.tolist()
    assert_lazy_close(data, want)


@pytest.mark.parametrize("lengths, message", [
    ([1, 3], "sorted in decreasing order"), ([2, 0], "greater than 0"),
    ([2, 2, 1], "equal to batch_size")])
def test_bad_lengths_raise_eagers_errors(lengths, message):
    x = torch.randn(2, 3, 2)
    with pytest.raises(RuntimeError, match=message):
        pack_padded_sequence(x, torch.tensor(lengths), batch_first=True)
    with pytest.raises(RuntimeError, match=message):
        pack_padded_sequence(lazy(x), torch.tensor(lengths), batch_first=True)
