"""The results of a graph compiled by the torch.compile backend
(``frontends/aot_graph``): an input returned unchanged is the caller's own
tensor, a result IREE leaves in an input's memory is the caller's to keep
(copied out), and the rest are read without a copy."""
from __future__ import annotations

import torch
import torch.fx as fx

from lazy_mlir.config import current_config
from lazy_mlir.frontends.aot_graph import compile_aot_graph
from lazy_mlir.targets import get_target


def _compiled(fn, *example):
    gm = fx.symbolic_trace(fn)
    for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), example):
        node.meta["val"] = value
    return compile_aot_graph(gm, list(example), target=get_target("cpu"),
                             config=current_config())


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.data_ptr() < sb.data_ptr() + sb.nbytes() and sb.data_ptr() < sa.data_ptr() + sa.nbytes()


def test_an_input_returned_unchanged_is_the_callers_tensor():
    # An aot forward returns the weights its backward reads.
    def forward(w, x):
        return w, torch.tanh(x @ w)

    w, x = torch.randn(8, 8), torch.randn(4, 8)
    run = _compiled(forward, w, x)
    for _ in range(2):  # (the first call learns the module's aliasing)
        same, y = run([w, x])
        assert same is w
        torch.testing.assert_close(y, torch.tanh(x @ w))


def test_a_result_in_an_inputs_memory_is_copied_out():
    # A reshape of an input: IREE returns the argument's buffer as another
    # shape, and that buffer is the caller's (imported) memory.
    def square(x):
        return x.reshape(4, 4), x * 2

    x = torch.arange(16.0)
    run = _compiled(square, x)
    for _ in range(2):
        grid, twice = run([x])
        assert run.entry.views == ((0, (0,)),)  # (what this test is about)
        assert torch.equal(grid, x.reshape(4, 4)) and torch.equal(twice, x * 2)
        assert not _shares_memory(grid, x) and not _shares_memory(twice, x)


def test_a_result_fed_to_another_graph_is_not_imported_again():
    # A forward's activation read by its backward: the backward is handed the
    # array the forward left it in; written since, it is imported as usual.
    import lazy_mlir as lm

    def forward(x, w):
        return (torch.tanh(x @ w),)

    def backward(y):
        return (y * 2,)

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    fwd, bwd = _compiled(forward, x, w), _compiled(backward, torch.empty(4, 8))
    (y,) = fwd([x, w])
    before = lm.metrics.counter_value("TransferToDevice")
    torch.testing.assert_close(bwd([y])[0], y * 2)
    assert lm.metrics.counter_value("TransferToDevice") == before  # (y's 128 bytes not moved)
    y.add_(1)  # written by the caller: its array is stale
    torch.testing.assert_close(bwd([y])[0], y * 2)
    assert lm.metrics.counter_value("TransferToDevice") == before + y.nbytes


def test_later_calls_read_each_result_as_the_first_did():
    # After its first call a graph reads its results by a plan (aot_graph's
    # _read_plan): the caller's own tensor, a copy out of an argument's
    # memory, DLPack's tensor in place, a constant; counted as the first call.
    import lazy_mlir as lm

    def mixed(w, x):
        return w, x.reshape(4, 4), x * 2, None

    w, x = torch.randn(3), torch.arange(16.0)
    run = _compiled(mixed, w, x)
    moved = []
    for i in range(3):
        before = lm.metrics.counter_value("TransferFromDevice")
        same, grid, twice, none = run([w, x])
        moved.append(lm.metrics.counter_value("TransferFromDevice") - before)
        assert same is w and none is None
        assert torch.equal(grid, x.reshape(4, 4)) and torch.equal(twice, x * 2)
        assert not _shares_memory(grid, x) and not _shares_memory(twice, x)
        x = x + 1  # (a new argument each call)
    assert run._plan is not None and moved[1] == moved[2] == moved[0] > 0


def test_a_detached_alias_of_a_result_is_handed_over():
    # autograd stores a gradient as grad.detach() (a new tensor over the same
    # storage, sharing its version counter): the optimizer's graph is handed
    # that alias, and takes the array the backward left it in.
    import lazy_mlir as lm

    def forward(x, w):
        return (torch.tanh(x @ w),)

    def plus_one(y):
        return (y + 1,)

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    fwd, nxt = _compiled(forward, x, w), _compiled(plus_one, torch.empty(8, 8))
    for _ in range(2):  # (the second call reads its result by the plan)
        (y,) = fwd([x, w])
    alias = y.detach()
    before = lm.metrics.counter_value("TransferToDevice")
    torch.testing.assert_close(nxt([alias])[0], y + 1)
    assert lm.metrics.counter_value("TransferToDevice") == before  # (not moved)
    # The same address and shape in another layout is not that array.
    torch.testing.assert_close(nxt([y.t()])[0], y.t() + 1)
    assert lm.metrics.counter_value("TransferToDevice") == before + y.nbytes
    alias.mul_(3)  # written through the alias: the array is stale for y too
    torch.testing.assert_close(nxt([y])[0], y + 1)
    assert lm.metrics.counter_value("TransferToDevice") == before + 2 * y.nbytes
