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
