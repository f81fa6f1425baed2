"""Device data shared between tensors made alike: empty tensors and the
deterministic host factories (``arange``, ``eye``, ...).

A step that makes the same small constant every step (GPT-2's positions,
``transformers``' empty KV-cache tensors) reads the same device data every
step: nothing recorded, computed or uploaded again. Sharing is safe because
nothing writes device data: a write rebinds the written tensor's storage.
"""
from __future__ import annotations

import torch

import lazy_mlir as lm


def _value(t):
    return t._storage.value


def test_empty_tensors_share_their_data_and_record_nothing():
    a = torch.tensor([], device="lazy")
    b = torch.empty(0, device="lazy")
    assert _value(a) is _value(b)
    assert not _value(a).pending  # data, not a node
    assert _value(torch.empty(0, 3, device="lazy")) is not _value(a)  # another shape
    assert _value(torch.tensor([], dtype=torch.int64, device="lazy")) is not _value(a)
    k = torch.randn(2, 3)
    # transformers' DynamicCache: cat onto an empty tensor (skipped, as in eager)
    out = torch.cat([a, k.to("lazy").reshape(-1)])
    assert torch.equal(out.cpu(), torch.cat([torch.tensor([]), k.reshape(-1)]))


def test_a_write_into_a_shared_empty_tensor_is_its_own():
    a = torch.empty(0, device="lazy")
    b = torch.empty(0, device="lazy")
    shared = _value(b)
    a.add_(1.0)
    a.copy_(torch.ones(0))
    assert _value(b) is shared and _value(torch.empty(0, device="lazy")) is shared
    assert a.cpu().shape == (0,) and b.cpu().shape == (0,)


def test_a_repeated_factory_is_the_same_device_data_uploaded_once():
    x = torch.arange(6, device="lazy")
    y = torch.arange(6, device="lazy")
    assert _value(x) is _value(y)
    assert _value(torch.arange(7, device="lazy")) is not _value(x)
    assert _value(torch.arange(6.0, device="lazy")) is not _value(x)  # a float 6.0: float32
    assert _value(torch.eye(3, device="lazy")) is _value(torch.eye(3, device="lazy"))
    # random factories draw anew
    assert _value(torch.randperm(6, device="lazy")) is not _value(torch.randperm(6, device="lazy"))
    x.add_(1)  # in place: rebinds x's storage only
    assert x.cpu().tolist() == [1, 2, 3, 4, 5, 6]
    assert y.cpu().tolist() == [0, 1, 2, 3, 4, 5]

    w = torch.randn(6).to("lazy")
    lm.mark_step()
    sent = []
    for _ in range(3):
        before = lm.metrics.counter_value("TransferToDevice")
        (w * torch.arange(6, device="lazy")).cpu()
        sent.append(lm.metrics.counter_value("TransferToDevice") - before)
    assert sent[1:] == [0, 0], sent
