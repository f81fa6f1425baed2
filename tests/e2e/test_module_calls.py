"""Calling a loaded module (runtime/invoke.py, LoadedModule): results read without
iree.runtime's per-result Python conversion, host memory kept only where a result
lies in it, empty inputs uploaded once."""
from __future__ import annotations

import gc
import weakref

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.lazy.sync import current_target
from lazy_mlir.compile_service.lookup import wait_for_compiles
from lazy_mlir.runtime.session import session_for


def _train(model, opt, steps, batch):
    for step in range(steps):
        x = batch(step)
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        lm.mark_step()
        loss.item()
        lm.wait_device_ops()
        wait_for_compiles()
    return loss


def test_results_are_read_without_the_function_invokers_conversion(monkeypatch):
    """A steady step's module returns its results without iree.runtime's
    ``_extract_vm_sequence_to_python`` (a Python call and a converter per result)."""
    import iree.runtime.function as function
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    expected = torch.nn.Linear(6, 4)
    expected.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    eager_opt = torch.optim.SGD(expected.parameters(), lr=0.1, momentum=0.9)
    xs = [torch.randn(3, 6) for _ in range(5)]
    _train(model, opt, 2, lambda s: xs[s].to("lazy"))  # compiled and loaded

    def refuse(*args, **kwargs):
        raise AssertionError("results converted by FunctionInvoker")
    monkeypatch.setattr(function, "_extract_vm_sequence_to_python", refuse)
    _train(model, opt, 3, lambda s: xs[2 + s].to("lazy"))
    for x in xs:
        eager_opt.zero_grad()
        expected(x).square().mean().backward()
        eager_opt.step()
    torch.testing.assert_close(model.weight.cpu(), expected.weight, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(model.bias.cpu(), expected.bias, rtol=1e-5, atol=1e-6)


def test_a_steps_upload_is_freed_after_its_step():
    """Each result used to keep every imported argument's host memory, and a
    step's outputs are the next step's arguments: every batch ever uploaded
    stayed alive through that chain."""
    if not session_for(current_target()).zero_copy:
        pytest.skip("imports host memory only with zero-copy transfers")
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    imported = []

    def batch(step):
        x = torch.randn(8, 16).to("lazy")
        imported.append(x)
        return x

    _train(model, opt, 3, batch)  # compiled and loaded
    first = imported[-1]
    _train(model, opt, 1, lambda s: first)
    kept = getattr(value_of(first).data.device, "_lazy_mlir_host", None)
    assert kept is not None, "the batch was not imported"
    gone = weakref.ref(kept[1])  # the numpy array over the batch's memory
    del first, kept
    imported.clear()
    _train(model, opt, 4, batch)
    imported.clear()
    gc.collect()
    assert gone() is None, "a later step's results still hold the first batch's memory"


def test_empty_inputs_share_one_device_array():
    session = session_for(current_target())
    a = session.to_device(torch.tensor([]))
    b = session.to_device(torch.empty(0))
    assert a is b
    assert session.to_device(torch.empty(2, 0)) is not a  # another shape
    x = torch.randn(3)
    out = torch.cat([torch.tensor([]).to("lazy"), x.to("lazy") * 2]).cpu()
    torch.testing.assert_close(out, x * 2)
