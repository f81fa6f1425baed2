import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.bucketing import bucket_for


def test_pad_to_bucket_pads_the_dim_up_to_its_bucket():
    x = torch.ones(2, 17, dtype=torch.long)
    y = lm.pad_to_bucket(x, 1, buckets=(16, 32, 64), value=-100)
    assert y.shape == (2, 32)
    assert (y[:, :17] == 1).all() and (y[:, 17:] == -100).all()
    assert lm.pad_to_bucket(torch.ones(3, 16, 4), -2, buckets=(16, 32)).shape == (3, 16, 4)
    assert lm.pad_to_bucket(torch.ones(5, 3), 0, buckets=(8,)).shape == (8, 3)


def test_a_length_over_the_largest_bucket_raises():
    with pytest.raises(ValueError):
        bucket_for(65, (16, 64))


def test_bucket_collate_pads_labels_with_their_value():
    collate = lm.bucket_collate(1, (8,), {"labels": -100})
    b = collate([{"input_ids": torch.ones(5, dtype=torch.long), "labels": torch.ones(5, dtype=torch.long)}] * 2)
    assert b["input_ids"].shape == (2, 8) and (b["labels"][:, 5:] == -100).all()
