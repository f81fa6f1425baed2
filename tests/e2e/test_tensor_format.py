"""A lazy tensor in an f-string formats as eager's does (lazy/tensor.py)."""
import torch

from e2e_helpers import lazy


def test_a_0d_tensor_formats_as_its_number():
    """Switch Transformers looks its experts up by f"expert_{idx}" with idx a
    0-d tensor: on the lazy device the key read "expert_tensor(1, ...)" and
    the program died with a KeyError where eager runs."""
    experts = torch.nn.ModuleDict({"expert_1": torch.nn.Identity()})
    idx = lazy(torch.tensor([0, 1, 1])).unique()[1]
    assert f"expert_{idx}" == "expert_1"
    assert experts[f"expert_{idx}"] is experts["expert_1"]
    assert f"{lazy(torch.tensor(2.5)):.2f}" == f"{torch.tensor(2.5):.2f}" == "2.50"


def test_a_tensor_of_more_dims_formats_as_its_repr():
    t = lazy(torch.tensor([1, 2]))
    assert f"{t}" == repr(t)
