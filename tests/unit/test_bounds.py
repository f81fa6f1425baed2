"""Index bounds checks at capture (``lazy/bounds.py``): what is clamped, what
is checked now, which flags a graph takes. Nothing here compiles."""
import pytest
import torch

from lazy_mlir.lazy import bounds, state
from lazy_mlir.lazy.capture import emit
from lazy_mlir.graph.program import Graph
from lazy_mlir.graph.ir import DeviceData, TensorSpec, Value

aten = torch.ops.aten


def device_value(*shape, dtype=torch.int64):
    """Device data with no host copy: its values are unknown at capture."""
    return Value.of_data(DeviceData(TensorSpec.of(torch.empty(shape, dtype=dtype))))


def host_value(t):
    return Value.of_data(DeviceData(TensorSpec.of(t), host=t))


@pytest.fixture(autouse=True)
def no_pending():
    state.reset()
    yield
    state.reset()


def test_host_index_raises_like_eager_at_capture():
    x = device_value(6, dtype=torch.float32)
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 6"):
        bounds.guard(aten.index.Tensor, (x, [host_value(torch.tensor([0, 7]))]), {}, emit)
    with pytest.raises(RuntimeError, match="index -1 is out of bounds"):
        bounds.guard(aten.gather.default, (x, 0, host_value(torch.tensor([-1]))), {}, emit)
    # In range (negatives where the op takes them): nothing recorded, nothing changed.
    args = (x, [host_value(torch.tensor([0, -6, 5]))])
    assert bounds.guard(aten.index.Tensor, args, {}, emit) == (args, {})
    assert not bounds._pending


def test_a_host_index_that_passed_is_not_read_again_until_it_is_written(monkeypatch):
    host = torch.tensor([0, 5, -100])
    target = host_value(host)
    reads = []
    real = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda h: reads.append(h) or real(h))
    for _ in range(2):  # nll_loss's forward and backward check the same targets
        bounds.guard(aten.nll_loss_forward.default, (device_value(3, 6, dtype=torch.float32),
                                                    target, None, 1, -100), {}, emit)
    assert len(reads) == 1
    with pytest.raises(IndexError, match="Target 5 is out of bounds"):  # the same, 4 classes
        bounds.guard(aten.nll_loss_forward.default, (device_value(3, 4, dtype=torch.float32),
                                                    target, None, 1, -100), {}, emit)
    host[1] = 6  # written in place: checked again
    with pytest.raises(IndexError, match="Target 6 is out of bounds"):
        bounds.guard(aten.nll_loss_forward.default, (device_value(3, 6, dtype=torch.float32),
                                                    target, None, 1, -100), {}, emit)


def test_host_index_behind_a_view_is_checked_at_capture():
    w = device_value(3, 4, dtype=torch.float32)
    i = emit(aten.view.default, (host_value(torch.tensor([[0, 3]])), [-1]), {})[0]
    with pytest.raises(IndexError, match="index out of range in self"):
        bounds.guard(aten.embedding.default, (w, i), {}, emit)


def test_device_index_is_clamped_and_flagged():
    x, i = device_value(6, dtype=torch.float32), device_value(4)
    (x2, _, i2), _ = bounds.guard(aten.index_select.default, (x, 0, i), {}, emit)
    assert x2 is x and i2 is not i
    assert i2.node.op is aten.clamp.default and i2.node.flat[1:] == [0, 5]
    assert len(bounds._pending) == 1 and bounds._pending[0].exc is IndexError
    assert "aten.index_select" in bounds._pending[0].message
    assert "test_bounds.py" in bounds._pending[0].message


def test_nll_loss_keeps_ignore_index_and_bool_masks_are_not_checked():
    logits = device_value(2, 4, dtype=torch.float32)
    (_, target, *_), _ = bounds.guard(
        aten.nll_loss_forward.default, (logits, device_value(2), None, 1, -100), {}, emit)
    assert target.node.op is aten.where.self  # -100 stays -100, the rest is clamped
    bounds._pending.clear()
    x = device_value(6, dtype=torch.float32)
    args = (x, [device_value(6, dtype=torch.bool)], device_value(dtype=torch.float32))
    assert bounds.guard(aten.index_put.default, args, {}, emit) == (args, {})
    assert not bounds._pending


def test_empty_index_and_unchecked_mode():
    x = device_value(6, dtype=torch.float32)
    args = (x, 0, device_value(0))
    assert bounds.guard(aten.index_select.default, args, {}, emit) == (args, {})
    with bounds.unchecked():
        (_, _, i), _ = bounds.guard(aten.index_select.default, (x, 0, device_value(3)), {}, emit)
    assert i.node.op is aten.clamp.default and not bounds._pending


def test_a_graph_takes_the_flags_it_can_compute():
    x = device_value(6, dtype=torch.float32)
    inside = emit(aten.mul.Scalar, (device_value(2), 2), {})[0]
    outside = emit(aten.mul.Scalar, (device_value(2), 3), {})[0]
    (_, _, a), _ = bounds.guard(aten.index_select.default, (x, 0, inside), {}, emit)
    (_, _, b), _ = bounds.guard(aten.index_select.default, (x, 0, outside), {}, emit)
    out = emit(aten.index_select.default, (x, 0, a), {})[0]
    taken = []

    def extra(order):
        flag, checks = bounds.take_flag(order, False, emit)
        taken.extend(checks)
        return [flag]

    graph = Graph.build([out], extra=extra)
    assert len(taken) == 1 and len(graph.outputs) == 2  # the result and its flag
    assert graph.outputs[1].spec.shape == ()
    assert len(bounds._pending) == 1  # ``outside`` waits for a graph that computes it
    flag, checks = bounds.take_flag({}, True, emit)  # mark_step takes every flag
    assert len(checks) == 1 and not bounds._pending


def test_graph_key_unchanged_without_pending_checks():
    v = emit(aten.mul.Scalar, (device_value(2), 2), {})[0]
    plain = Graph.build([v])
    with_hook = Graph.build([v], extra=lambda order: bounds.take_flag(order, False, emit)[:1])
    assert plain.key == with_hook.key and len(with_hook.outputs) == 1


def test_raise_if_flagged_names_every_failed_check():
    checks = [(RuntimeError, "aten.gather: an index is outside [0, 6)"),
              (IndexError, "aten.index_put: an index is outside [-6, 6)"),
              (IndexError, "aten.embedding: fine")]
    bounds.raise_if_flagged(torch.tensor([False, False, False]), checks)
    with pytest.raises(RuntimeError) as info:
        bounds.raise_if_flagged(torch.tensor([True, True, False]), checks)
    assert "aten.gather" in str(info.value) and "also aten.index_put" in str(info.value)
    assert "aten.embedding" not in str(info.value) and "next sync point" in str(info.value)


def test_an_index_selected_from_host_data_is_checked_through_the_data(monkeypatch):
    w = device_value(3, 4, dtype=torch.float32)
    data = torch.tensor([[0, 2], [1, 2]])
    src = host_value(data)
    reads = []
    real = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda h: reads.append(h) or real(h))
    for _ in range(2):  # a batch's ids behind a view, in embedding's forward and backward
        i = emit(aten.view.default, (src, [-1]), {})[0]
        assert bounds.guard(aten.embedding.default, (w, i), {}, emit) == ((w, i), {})
    assert len(reads) == 1 and reads[0] is data  # the data itself, once
    # Data with a bad value outside the part selected: the index itself decides.
    bad_elsewhere = host_value(torch.tensor([[0, 2], [1, 9]]))
    i = emit(aten.select.int, (bad_elsewhere, 0, 0), {})[0]
    assert bounds.guard(aten.embedding.default, (w, i), {}, emit) == ((w, i), {})
    i = emit(aten.select.int, (bad_elsewhere, 0, 1), {})[0]
    with pytest.raises(IndexError, match="index out of range in self"):
        bounds.guard(aten.embedding.default, (w, i), {}, emit)
    # A conversion on the way is no selection: -0.5 is out of range, its int64 0 is not.
    floats = host_value(torch.tensor([-0.5, 2.0]))
    i = emit(aten._to_copy.default, (floats,), {"dtype": torch.int64})[0]
    assert bounds.guard(aten.embedding.default, (w, i), {}, emit) == ((w, i), {})
    assert not bounds._pending


def test_a_recorded_op_is_guarded_from_its_plan_as_the_first_time():
    import inspect
    x = torch.arange(6.0).to("lazy")
    lines = []
    for _ in range(2):  # the second from the record plan and the guard's kept plans
        j = torch.tensor([0, 5]).to("lazy") * 1  # computed: clamped and flagged
        lines.append(inspect.currentframe().f_lineno + 1)
        out = torch.index_select(x, 0, j)
        clamp = out._storage.value.node.flat[2].node
        assert clamp.op is aten.clamp.default and clamp.flat[1:] == [0, 5]
    assert [c.exc for c in bounds._pending] == [IndexError, IndexError]
    for check, line in zip(bounds._pending, lines):
        assert check.flag.node.op is aten.any.default
        assert check.message == ("index out of range in aten.index_select: an index is "
                                 "outside [0, 6) (dimension 0 with size 6), captured at "
                                 f"{__file__}:{line}")
    host = torch.tensor([0, 6]).to("lazy")  # the same specs: a host index, checked now
    with pytest.raises(IndexError, match=r"index out of range in self \(lazy-mlir: "
                       r"aten.index_select, valid range \[0, 6\), captured at .*test_bounds"):
        torch.index_select(x, 0, host)


def test_an_index_guarded_again_reads_the_first_clamp_and_adds_no_flag():
    logits = device_value(2, 4, dtype=torch.float32)
    target = emit(aten.mul.Scalar, (device_value(2), 1), {})[0]  # computed: flagged
    (_, fwd, *_), _ = bounds.guard(
        aten.nll_loss_forward.default, (logits, target, None, 1, -100), {}, emit)
    (_, _, bwd, *_), _ = bounds.guard(  # the backward reads the very same targets
        aten.nll_loss_backward.default,
        (device_value(dtype=torch.float32), logits, target, None, 1, -100,
         device_value(dtype=torch.float32)), {}, emit)
    assert bwd is fwd and len(bounds._pending) == 1
    # Another range (or another index) is checked on its own.
    (_, _, other), _ = bounds.guard(aten.index_select.default,
                                    (device_value(3, dtype=torch.float32), 0, target), {}, emit)
    assert other is not fwd and len(bounds._pending) == 2
    bounds.take_flag({}, False, emit)  # a graph is cut: guarded afresh after
    (_, again, *_), _ = bounds.guard(
        aten.nll_loss_forward.default, (logits, target, None, 1, -100), {}, emit)
    assert again is not fwd and len(bounds._pending) == 3


def test_positions_plus_zero_and_padded_labels_are_checked_through_the_data(monkeypatch):
    """transformers' GPT-2: positions ``arange(n) + 0``, and causal-LM labels
    shifted as ``pad(labels, value=-100)[..., 1:]``: the data is checked,
    once, and no guard is recorded."""
    w = device_value(5, 4, dtype=torch.float32)
    logits = device_value(3, 5, dtype=torch.float32)
    positions, labels = torch.arange(4), torch.tensor([[1, 2, 4]])
    pos_data, label_data = host_value(positions), host_value(labels)
    reads = []
    real = torch.aminmax
    monkeypatch.setattr(torch, "aminmax", lambda h: reads.append(h) or real(h))

    def shifted(value):
        p = emit(aten.constant_pad_nd.default, (label_data, [0, 1], value), {})[0]
        s = emit(aten.slice.Tensor, (p, 1, 1, 9223372036854775807), {})[0]
        c = emit(aten.clone.default, (s,), {"memory_format": torch.contiguous_format})[0]
        return emit(aten.view.default, (c, [-1]), {})[0]
    for _ in range(2):  # two steps
        i = emit(aten.add.Tensor, (pos_data, 0), {})[0]
        i = emit(aten.unsqueeze.default, (i, 0), {})[0]
        assert bounds.guard(aten.embedding.default, (w, i), {}, emit) == ((w, i), {})
        args = (logits, shifted(-100.0), None, 1, -100)
        assert bounds.guard(aten.nll_loss_forward.default, args, {}, emit) == (args, {})
    assert len(reads) == 2 and reads[0] is positions and reads[1] is labels
    assert not bounds._pending
    # A pad value neither ignored nor in range: the index itself decides, as eager.
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        bounds.guard(aten.nll_loss_forward.default, (logits, shifted(7.0), None, 1, -100), {},
                     emit)
    # x + 2 selects nothing: computed, so clamped and flagged.
    i = emit(aten.add.Tensor, (pos_data, 2), {})[0]
    bounds.guard(aten.embedding.default, (w, i), {}, emit)
    assert len(bounds._pending) == 1
