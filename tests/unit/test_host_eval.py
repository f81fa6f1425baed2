"""``lazy/host_eval.py``: a host read of a value made from constants alone
(transformers' packed-sequence check of ``arange`` positions) is answered at
capture, with no graph compiled and no sync counted; a read of data is not.
Nothing here compiles."""
import torch

import lazy_mlir as lm  # noqa: F401 - the lazy device
from lazy_mlir import metrics
from lazy_mlir.lazy import host_eval
from lazy_mlir.lazy.capture import value_of


def _packed_mask(positions):
    first = positions[:, :1] - 1
    diff = torch.diff(positions, prepend=first, dim=-1)
    return (diff != 1).cumsum(-1)


def test_a_read_of_arange_positions_is_answered_without_a_graph():
    metrics.reset()
    positions = torch.arange(8, device="lazy").unsqueeze(0).expand(2, -1) + 3
    assert bool((_packed_mask(positions)[:, -1] == 0).all())
    assert metrics.counter_value("folded::_local_scalar_dense") == 1
    assert metrics.counter_value("sync::_local_scalar_dense") == 0
    assert metrics.counter_value("UncachedCompile") == 0
    restart = torch.cat([torch.arange(3, device="lazy"), torch.arange(5, device="lazy")])
    assert not bool((_packed_mask(restart.unsqueeze(0))[:, -1] == 0).all())  # eager's answer


def test_a_value_that_reads_data_is_left_to_the_sync():
    x = torch.tensor([[0, 1, 2]]).to("lazy")
    assert host_eval.value(value_of((_packed_mask(x)[:, -1] == 0).all())) is None
    r = torch.rand(3, device="lazy")
    assert host_eval.value(value_of(r.sum())) is None  # (a random draw)
