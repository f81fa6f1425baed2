"""The per-op capture fast path (record plans) and the release of dead graphs.

Record plans and shape inference are memoized by an op's input specs and
constants; constants that compare equal but mean different things (1, 1.0
and True; 0.0 and -0.0) must not share an entry. A dead graph must release
the device buffers it read at once, not when Python's cyclic collector runs.
"""
from __future__ import annotations

import gc
import math

import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.graph import ir


def test_int_and_float_constants_are_not_one_memo_entry():
    x = torch.arange(4).to("lazy")
    a = x + 1
    b = x + 1.0  # same op, same spec, a constant equal to the one above
    c = x + True
    assert (a.dtype, b.dtype, c.dtype) == (torch.int64, torch.float32, torch.int64)
    assert b.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert a.cpu().tolist() == [1, 2, 3, 4]


def test_signed_zero_constants_are_not_one_graph():
    x = torch.tensor([1.0, 2.0]).to("lazy")
    pos = (x * 0.0).cpu()
    neg = (x * -0.0).cpu()
    assert [math.copysign(1, v) for v in pos.tolist()] == [1, 1]
    assert [math.copysign(1, v) for v in neg.tolist()] == [-1, -1]


def test_repeated_steps_capture_the_same_graph():
    x = torch.randn(8).to("lazy")
    lm.mark_step()
    keys = []
    for _ in range(3):
        y = (x * 2.5).relu() + x.t()
        lm.metrics.reset()
        y.cpu()
        keys.append(lm.metrics.counter_value("UncachedCompile"))
    assert keys[1:] == [0, 0]


def _live_device_buffers() -> int:
    return sum(1 for d in list(ir.live_data) if d.device is not None or d.future is not None)


def test_dead_graphs_free_device_buffers_without_the_cyclic_collector():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 16).to("lazy"), torch.randint(0, 4, (8,)).to("lazy")
    counts = []
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for step in range(10):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            lm.mark_step()
            loss.item()
            if step >= 3:
                lm.wait_device_ops()
                counts.append(_live_device_buffers())
    finally:
        if was_enabled:
            gc.enable()
    assert max(counts) == min(counts), counts


def test_an_in_place_op_on_its_plan_makes_no_tensor_for_its_result(monkeypatch):
    """``add_``, ``mul_`` (a lifted scalar), ``lerp_`` record their functional
    op and assign its Value to the tensor: once planned, no wrapper tensor is
    made for the intermediate result (half the cost of an optimizer's op).
    A result of another dtype is still cast, as the in-place kernel does."""
    from lazy_mlir.lazy import capture, dispatch
    y, w = torch.randn(4, 4), torch.randn(4, 4)
    ly, lw = y.to("lazy"), w.to("lazy")

    def ops(a, b):
        a.add_(b).mul_(0.9).lerp_(b, 0.25)

    ops(ly, lw)  # plans made here
    made = []
    real = capture.wrap_value
    for module in (capture, dispatch):  # the plan path (capture) and the router's
        monkeypatch.setattr(module, "wrap_value", lambda v: made.append(v) or real(v))
    ops(ly, lw)
    assert made == []
    ops(y, w)
    ops(y, w)
    torch.testing.assert_close(ly.cpu(), y)
    half = torch.ones(3, dtype=torch.float16)
    lhalf = half.to("lazy")
    lhalf.add_(torch.full((3,), 0.5).to("lazy"))  # float32 result, cast to float16
    half.add_(torch.full((3,), 0.5))
    assert lhalf.dtype == torch.float16 and torch.equal(lhalf.cpu(), half)


def test_a_planned_op_returns_its_tuple_or_list_without_a_pytree_walk(monkeypatch):
    from lazy_mlir.lazy import capture
    x, w, b = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    lx, lw, lb = x.to("lazy"), w.to("lazy"), b.to("lazy")
    aten = torch.ops.aten
    aten.native_layer_norm.default(lx, [8], lw, lb, 1e-5)  # (the plans made)
    lx.split(3, dim=1)

    def walk(*args):
        raise AssertionError("tree_unflatten on a planned op")
    monkeypatch.setattr(capture, "tree_unflatten", walk)
    out = aten.native_layer_norm.default(lx, [8], lw, lb, 1e-5)
    parts = lx.split(3, dim=1)
    assert type(out) is tuple and len(out) == 3 and type(parts) is tuple
    want = aten.native_layer_norm.default(x, [8], w, b, 1e-5)
    for got, ref in zip(out, want):
        torch.testing.assert_close(got.cpu(), ref)
    assert [p.cpu().tolist() for p in parts] == [p.tolist() for p in x.split(3, dim=1)]


def test_batch_norm_and_fused_adamw_read_their_schemas_once(monkeypatch):
    """``func._schema.arguments`` builds new Python objects on every read
    (~3 us): what a repeated call needs of it is kept on the op."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    x = torch.randn(4, 3, 5)
    lazy_bn = torch.nn.BatchNorm1d(3).to("lazy")
    opt = torch.optim.AdamW(lazy_bn.parameters(), lr=0.1, fused=True)
    lazy_bn(x.to("lazy")).sum().backward()  # (what is kept, kept)
    opt.step()

    class Unread:
        def __getattr__(self, name):
            raise AssertionError(f"_schema.{name} read again")
    aten = torch.ops.aten
    for op in (aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
               aten._native_batch_norm_legit_functional.default, aten._fused_adamw_.default):
        monkeypatch.setattr(op, "_schema", Unread())
    lazy_bn(x.to("lazy"))
    opt.step()
    monkeypatch.undo()
    bn(x)
    bn(x)
    torch.testing.assert_close(lazy_bn.running_mean.cpu(), bn.running_mean)
    torch.testing.assert_close(lazy_bn.running_var.cpu(), bn.running_var)


def test_a_repeated_step_compares_no_spec_by_value(monkeypatch):
    """Specs are one object per value (``TensorSpec.of``): the fused AdamW
    node's outputs, read as next step's inputs, match its record plan's key
    by identity, not by the dataclass's ``__eq__`` (~0.6 us a tensor)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)).to("lazy")
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    x = torch.randn(2, 4).to("lazy")
    compared = []
    real = ir.TensorSpec.__eq__
    for step in range(3):
        if step == 2:
            monkeypatch.setattr(ir.TensorSpec, "__eq__",
                                lambda a, b: compared.append(a) or real(a, b))
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()
        lm.mark_step()
    assert compared == []
