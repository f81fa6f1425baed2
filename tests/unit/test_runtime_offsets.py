"""View offsets as graph inputs (``lazy/offsets.py``, ``ops/offsets.py``): the
graph of ``x[i:i+n]`` is one graph for every ``i`` (no compiler here)."""
import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode

import lazy_mlir as lm  # noqa: F401
from lazy_mlir.graph.program import Graph
from lazy_mlir.lazy.capture import value_of
from lazy_mlir.lazy.offsets import normalized_start, select_offset, slice_offset
from lazy_mlir.ops.offsets import expand_runtime_offsets, ops

aten = torch.ops.aten
BIG = 9223372036854775807  # what ``x[i:]`` passes as the end


def test_slice_offset_is_pytorchs_clamped_start_and_length():
    assert slice_offset((10, 4), (0, 3, 7), {}) == (0, 3, 4, 1)
    assert slice_offset((10, 4), (0, -3, BIG), {}) == (0, 7, 3, 1)
    assert slice_offset((10, 4), (-1, 1, 3), {}) == (1, 1, 2, 1)
    assert slice_offset((10, 4), (0, 2, 7, 2), {}) == (0, 2, 3, 2)
    assert slice_offset((10, 4), (0, 8, 20), {}) == (0, 8, 2, 1)  # end clamped
    assert slice_offset((10, 4), (0, -20, 2), {}) == (0, 0, 2, 1)  # start clamped
    assert slice_offset((10, 4), (0, 0, 4), {}) == (0, 0, 4, 1)  # a start of 0 too
    assert slice_offset((10, 4), (0, None, None), {}) is None  # the whole dimension
    assert slice_offset((10, 4), (0, 0, BIG), {}) is None
    assert slice_offset((10, 4), (0, 5, 5), {}) is None  # empty
    assert slice_offset((10, 4), (), {"dim": 1, "start": 1}) == (1, 1, 3, 1)
    for size, start in ((10, -3), (10, 12), (10, None), (0, 0)):
        x = torch.arange(max(size, 1))[:size]
        want = x[start:].storage_offset() if size else 0
        assert normalized_start(size, start) == want


def test_select_offset_is_non_negative():
    assert select_offset((10, 4), (1, -1), {}) == (1, 3)
    assert select_offset((10, 4), (-2, 7), {}) == (0, 7)


def _graph(t):
    return Graph.build([value_of(t)])


def test_slices_at_different_offsets_are_one_graph(monkeypatch):
    data = torch.arange(60.0).reshape(12, 5).to("lazy")
    graphs = [_graph(data[i:i + 3] * 2) for i in (0, 4, 9, -5)]
    assert len({g.key for g in graphs}) == 1
    assert [n.op for n in graphs[0].nodes][0] is ops.slice_at.default
    assert [d.spec.signature() for d in graphs[0].inputs] == ["float32[12, 5]", "int64[]", "float32[]"]
    assert [int(g.inputs[1].host) for g in graphs] == [0, 4, 9, 7]
    monkeypatch.setenv("LAZY_MLIR_LIFT_INTS", "0")
    assert len({_graph(data[i:i + 3] * 2).key for i in (0, 4)}) == 2


def test_selects_and_writes_at_different_offsets_are_one_graph():
    data = torch.zeros(6, 4).to("lazy")
    assert len({_graph(data[:, i] + 1).key for i in (0, 2, -1)}) == 1
    keys = set()
    for i in (0, 3):
        y = data.clone()
        y[i:i + 2] = 1.0
        y[i + 2] += 5.0
        keys.add(_graph(y).key)
    assert len(keys) == 1


def test_a_whole_dimension_slice_is_not_lifted():
    data = torch.zeros(6, 4).to("lazy")
    assert [d.spec.signature() for d in _graph(data[:, :] + 1).inputs] == ["float32[6, 4]"]


def _fx(fn, *shapes):
    """An fx graph of ``fn`` on int64 placeholders of ``shapes``, as
    ``to_fx`` makes one (``meta['val']`` fake tensors)."""
    mode = FakeTensorMode()
    g = fx.Graph()
    phs = []
    for i, shape in enumerate(shapes):
        p = g.placeholder(f"arg{i}")
        with mode:
            p.meta["val"] = torch.empty(shape, dtype=torch.int64)
        phs.append(p)
    out = fn(g, *phs)
    with mode:
        out.meta["val"] = fn(None, *[p.meta["val"] for p in phs])
    g.output((out,))
    return fx.GraphModule(torch.nn.Module(), g)


def test_expansion_reads_the_offset_and_computes_what_the_ops_do():
    def call(g, op, *args):
        return g.call_function(op, args) if g is not None else op(*args)
    cases = [
        (lambda g, x, s, r: call(g, ops.slice_at.default, x, 0, s, 3, 2), ops.slice_at),
        (lambda g, x, s, r: call(g, ops.select_at.default, x, 1, s), ops.select_at),
        (lambda g, x, s, r: call(g, ops.slice_scatter_at.default, x, r, 0, s, 1),
         ops.slice_scatter_at),
        (lambda g, x, s, r: call(g, ops.select_scatter_at.default, x,
                                 call(g, aten.select.int, r, 0, 0), 0, s), ops.select_scatter_at),
    ]
    x = torch.arange(40).reshape(8, 5)
    r = -torch.arange(10).reshape(2, 5)
    s = torch.tensor(3)
    eager = {ops.slice_at: x[3:8:2], ops.select_at: x[:, 3],
             ops.slice_scatter_at: torch.slice_scatter(x, r, 0, 3, 5),
             ops.select_scatter_at: torch.select_scatter(x, r[0], 0, 3)}
    for fn, op in cases:
        gm = _fx(fn, (8, 5), (), (2, 5))
        assert torch.equal(gm(x, s, r)[0], eager[op])  # the op's CPU kernel
        gm = expand_runtime_offsets(gm)
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert aten.Int.Tensor in targets and not any(
            getattr(t, "namespace", None) == "lazy_mlir" for t in targets), targets
        assert torch.equal(gm(x, s, r)[0], eager[op])
