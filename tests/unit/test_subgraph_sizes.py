"""``ops/subgraph_sizes.py``: a template traced once with symbolic sizes,
made again at other sizes without tracing, and refused where its structure
depends on a size (the caller then traces again)."""
import torch

from lazy_mlir.ops import subgraph, subgraph_sizes


def _rows(x, w, n):
    """Sizes computed by the graph: a view to ``[b * t, d]`` and back, and
    a size passed as an ``[0, n]`` carrier (as compiled autograd does)."""
    b, t, d = x.shape
    rows = (x.reshape(b * t, d) @ w).view(b, t, -1)
    return (rows.sum(1) * n.shape[1], rows.transpose(1, 2))


def test_one_trace_serves_other_lengths():
    w = torch.randn(8, 5)
    sized = subgraph_sizes.trace_sized(_rows, [torch.randn(3, 7, 8), w], [torch.empty(0, 7)])
    assert sized.symbolic
    for t in (7, 11, 2):
        x, n = torch.randn(3, t, 8), torch.empty(0, t)
        template = sized.at([x, w], [n])
        want = _rows(x, w, n)
        assert template.outputs == tuple((tuple(o.shape), o.stride(), o.dtype) for o in want)
        got = torch.ops.lazy_mlir.subgraph([x, w], template.key)  # (its CPU kernel)
        for a, e in zip(got, want):
            torch.testing.assert_close(a, e)
        # numbers only: no symbolic size, no size carrier left in the graph
        assert len([n_ for n_ in template.gm.graph.nodes if n_.op == "placeholder"]) == 2
        assert not any(isinstance(s, torch.SymInt) for n_ in template.gm.graph.nodes
                       for s in getattr(n_.meta.get("val"), "shape", ()))
    assert sized.at([torch.randn(3, 7, 8), w], [torch.empty(0, 7)]) is \
        sized.at([torch.randn(3, 7, 8), w], [torch.empty(0, 7)])  # (one per size)


def test_the_template_at_a_size_matches_a_trace_at_it():
    w = torch.randn(8, 5)
    sized = subgraph_sizes.trace_sized(_rows, [torch.randn(3, 7, 8), w], [torch.empty(0, 7)])
    at = sized.at([torch.randn(3, 9, 8), w], [torch.empty(0, 9)])
    static = subgraph_sizes.trace_sized(_rows, [torch.randn(3, 9, 8), w],
                                        [torch.empty(0, 9)], symbolic=False)
    assert not static.symbolic
    assert at.outputs == static.at([torch.randn(3, 9, 8), w], [torch.empty(0, 9)]).outputs


def _branchy(x):
    """A structure that depends on a size: another graph past 4 rows."""
    return (x * 2,) if x.shape[0] > 4 else (x.sum(0, keepdim=True) + x,)


def test_a_size_that_changes_the_structure_is_refused():
    sized = subgraph_sizes.trace_sized(_branchy, [torch.randn(6, 3)], [])
    assert sized.at([torch.randn(9, 3)], []) is not None  # (9 > 4 too)
    assert sized.at([torch.randn(3, 3)], []) is None  # (the trace assumed > 4)
    again = subgraph_sizes.trace_sized(_branchy, [torch.randn(3, 3)], [])
    x = torch.randn(3, 3)
    got = torch.ops.lazy_mlir.subgraph([x], again.at([x], []).key)
    torch.testing.assert_close(got[0], _branchy(x)[0])


def test_sizes_traced_equal_must_stay_equal():
    """Duck sizing: two sizes equal when traced are one symbol."""
    sized = subgraph_sizes.trace_sized(lambda a, b: (a + 1, b * 2),
                                       [torch.randn(5, 3), torch.randn(5, 2)], [])
    assert sized.at([torch.randn(7, 3), torch.randn(7, 2)], []) is not None
    assert sized.at([torch.randn(7, 3), torch.randn(8, 2)], []) is None


def test_sizes_zero_and_one_stay_numbers():
    sized = subgraph_sizes.trace_sized(lambda a: (a * 3,), [torch.randn(4, 1)], [])
    assert sized.at([torch.randn(6, 1)], []) is not None
    assert sized.at([torch.randn(6, 2)], []) is None  # (1 broadcasts: not a symbol)
    assert sized.at([torch.randn(1, 1)], []) is None  # (traced as >= 2)


def test_a_strided_view_of_a_wider_row():
    """The heads of one third of ``[b, t, 3 * h * d]`` (attention's q, k, v):
    strides ``(t * 3hd, d, 3hd, 1)`` follow the length."""
    def heads(t):
        return torch.randn(2, t, 3 * 2 * 4)[..., :8].view(2, t, 2, 4).transpose(1, 2)
    sized = subgraph_sizes.trace_sized(lambda q: (q * 2,), [heads(5)], [])
    q = heads(9)
    template = sized.at([q], [])
    assert template is not None
    torch.testing.assert_close(torch.ops.lazy_mlir.subgraph([q], template.key)[0], q * 2)


def test_a_registered_template():
    sized = subgraph_sizes.trace_sized(lambda a: (a.exp(),), [torch.randn(4, 3)], [])
    template = sized.at([torch.randn(5, 3)], [])
    assert subgraph.template(template.key) is template
