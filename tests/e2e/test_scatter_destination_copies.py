"""A scatter into a tensor that another result still reads gets a copy of
its own (``passes/scatter_destinations``), one IREE cannot erase."""
from __future__ import annotations

import torch

import lazy_mlir as lm


def _read_then_scatter(v0):
    """Fuzzer seed 56, shrunk: a transposed view read by ``index_select``
    (the read folds away: the result is the view), then ``scatter_`` into
    the same storage."""
    v1 = v0.split(1, 0)[0]
    v1.masked_fill_(v1 > 7, 1)
    v7 = v1.transpose(0, 2).index_select(0, torch.tensor([0], device=v0.device))
    v1.scatter_(0, torch.zeros((1, 3, 1), dtype=torch.int64, device=v0.device),
                torch.ones((1, 3, 1), dtype=torch.int16, device=v0.device))
    return v0, v7


def test_a_read_returned_before_a_scatter_into_its_storage_under_lm_jit():
    """``lm.jit`` clamps its indices in the graph (``bounds.in_graph``),
    so the constant index folds and IREE's schedule changes: the copy of the
    scatter's destination was a ``linalg.copy``, which IREE erased, and the
    copy IREE made instead ran after the scatter, so ``v7`` came back
    scattered (``[1, 1, 1]`` for ``[-19, -6, -18]``), silently."""
    make = lambda: torch.tensor([-19, -6, -18, 19, 2, 14], dtype=torch.int16).reshape(2, 3, 1)
    want = _read_then_scatter(make())
    got = lm.jit(_read_then_scatter).lower(make()).compile()(make())
    assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)


def test_the_copy_is_made_in_a_graph_with_a_view_dtype():
    """A ``view(dtype)`` anywhere in the graph sent it to IREE's torch
    input, past the linalg-stage passes: the scatter's destination had no
    copy and ``v7`` came back scattered (fuzzer seeds 33 and 56 in one
    ``lm.jit`` function), silently."""
    def fn(v0, f):
        return _read_then_scatter(v0) + (f.T.view(torch.int16),)
    make = lambda: (torch.tensor([-19, -6, -18, 19, 2, 14], dtype=torch.int16).reshape(2, 3, 1),
                    torch.tensor([[0.5, -1.0, 2.0], [3.0, 0.25, -4.0]], dtype=torch.float16))
    want = fn(*make())
    got = lm.jit(fn).lower(*make()).compile()(*make())
    assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)


def test_a_slice_read_before_a_second_write_into_the_same_rows():
    """Fuzzer seed 800230, shrunk: a write through a strided view
    (``insert_slice`` into the base), a read of those rows (``tanh`` of an
    ``extract_slice`` of the written base), then a second write into them:
    IREE ran the second ``insert_slice`` in place before the read, and
    ``tanh`` came back computed from the zeros (silently, on the lazy device;
    only beside the ``max`` and ``cumsum`` that change IREE's schedule). The second write's
    destination now gets a copy of its own."""
    import e2e_helpers

    def program(dev):
        g = torch.Generator().manual_seed(5601610)  # (the fuzzer's data: the schedule depends on it)
        v0 = torch.randint(0, 40, (18,), generator=g).to(torch.uint8).reshape(6, 3, 1).to(dev)[::2]
        v1, v2 = torch.max(v0, 1)
        v0.add_(3)
        v4 = torch.tanh(v0)
        v5 = torch.cumsum(v2, 1)
        v0.zero_()
        return v0, v1, v2, v4, v5
    counters = e2e_helpers.Counters()
    want, got = program("cpu"), program("lazy")
    lm.mark_step()
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
    assert counters.delta("EagerGraph") == 0


def test_a_scatter_of_ones_scatters_ones():
    """Fuzzer seed 800256, shrunk: ``scatter_`` of ``ones`` into a gathered
    row under ``lm.jit`` (and torch.compile): torch-mlir makes the indices
    and the updates in one ``linalg.generic`` of no inputs that yields the
    constant 1, and IREE 3.13 scattered that generic's initial zeros
    (``[0]`` for ``[1]``, silently). The updates now reach the scatter
    through a barrier."""
    def fn(v1):
        v6 = v1[torch.tensor([1], device=v1.device)]
        v6.scatter_(0, torch.tensor([0], device=v1.device),
                    torch.ones((1,), dtype=v1.dtype, device=v1.device))
        return [v1, v6]
    for x in (torch.tensor([5, 9, 4]), torch.tensor([5.0, 9.0, 4.0])):
        got = lm.jit(fn).lower(x.clone()).compile()(x.clone())
        assert all(torch.equal(g, w) for g, w in zip(got, fn(x.clone()))), got


def _lazy_like_eager(program) -> None:
    """``program(dev)`` on the lazy device (one graph) gives eager's results,
    bit for bit, with no graph run eagerly."""
    import e2e_helpers
    counters = e2e_helpers.Counters()
    want, got = program("cpu"), program("lazy")
    lm.mark_step()
    for k, (g, w) in enumerate(zip(got, want)):
        assert torch.equal(g.cpu(), w), (k, g.cpu(), w)
    assert counters.delta("EagerGraph") == 0


def test_a_bool_written_through_a_lifted_select_leaves_an_earlier_read_alone():
    """Fuzzer seed 801224, shrunk: ``index_put_`` through one view of a bool
    ``v0``, ``v8 = v0 + False`` read, then ``v0[-1].zero_()`` (a
    ``select_scatter`` at a lifted offset: an ``insert_slice`` of a constant
    into the written ``v0``, which ``v8`` also reads). IREE 3.13 ran the
    insert in place and copied ``v0`` for ``v8`` after it, in the same
    command buffer as the unrelated strided read of ``v2``: ``v8`` came back
    ``[False]`` for ``[True]``, silently. The insert's destination now gets
    a copy of its own."""
    def program(dev):
        v0 = torch.tensor([False]).to(dev)
        v2 = torch.arange(8, dtype=torch.float32).reshape(4, 2).to(dev)[::2]
        v5 = v0.flatten()
        v6 = v0[-1]
        v5.index_put_((torch.tensor([-1], device=dev),), torch.ones((1,), dtype=torch.bool,
                                                                   device=dev))
        v8 = torch.add(v0, False)
        v6.zero_()
        return v0, v2.clone(), v5, v6, v8
    _lazy_like_eager(program)


def test_a_result_read_before_a_slice_of_its_clone_is_zeroed():
    """Not a bool matter, nor one of the lifted offset: ``z = y.clone()``
    folds away, so ``z[1].zero_()`` is an ``insert_slice`` into ``y`` itself,
    and IREE 3.13 ran it before copying ``y`` for its return (its elementwise
    dispatch flattened: a reshape between) whenever another dispatch ran
    beside it (``w + w``): ``y`` came back with row 1 zeroed, every dtype,
    with offsets lifted or not."""
    for dtype in (torch.float32, torch.int32, torch.bool):
        def program(dev, dtype=dtype):
            x = torch.ones(4, 2, dtype=dtype).to(dev)
            w = torch.ones(4, 2).to(dev)
            y = x * 2 if dtype != torch.bool else ~x
            z = y.clone()
            z[1].zero_() if dtype != torch.bool else z[1].fill_(True)
            return y, z, w + w
        _lazy_like_eager(program)


def test_a_sum_read_before_a_slice_of_its_clone_is_written():
    """The read a reduction (a dispatch of its own; 1-d): IREE 3.13 ran the
    insert into ``y`` before the sum of ``y`` (``12.`` for ``16.``)."""
    def program(dev):
        y = torch.ones(8).to(dev) * 2
        s = y.sum()
        z = y.clone()
        z[2:4].zero_()
        return s, z, torch.ones(8).to(dev) + 1
    _lazy_like_eager(program)
