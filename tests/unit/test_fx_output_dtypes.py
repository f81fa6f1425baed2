"""``pipeline.fx_graph.decompose`` keeps each output's recorded dtype: a
decomposition that returns another dtype (fuzzer seed 940125: a float16
``where`` beside a uint8 operand computed in float32) is converted back,
so a module's buffers have the dtypes the graph recorded."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.pipeline.fx_graph import decompose

aten = torch.ops.aten


def _upcasting_where(cond, a, b):
    """``where`` computed (and returned) in float32."""
    keep = aten._to_copy.default(cond, dtype=torch.float32)
    return keep * aten._to_copy.default(a, dtype=torch.float32) + (1 - keep) * \
        aten._to_copy.default(b, dtype=torch.float32)


def test_a_decomposition_that_changes_an_outputs_dtype_is_converted_back():
    def fn(h, u):
        return aten.where.self(h > 0, h, u), h * 2

    h = torch.tensor([1.5, -2.0], dtype=torch.float16)
    u = torch.tensor(3, dtype=torch.uint8)
    gm = make_fx(fn, tracing_mode="fake")(h, u)
    out = decompose(gm, {aten.where.self: _upcasting_where}, base=False)
    assert [n.meta["val"].dtype for n in out.graph.find_nodes(op="output")[0].args[0]] == [
        torch.float16, torch.float16]
    got = out(h, u)
    want = fn(h, u)
    assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want))


def test_outputs_of_the_recorded_dtypes_are_left_alone():
    gm = make_fx(lambda h: (h * 2,), tracing_mode="fake")(torch.ones(2, dtype=torch.float16))
    out = decompose(gm, {}, base=False)
    assert not [n for n in out.graph.nodes if n.target is torch.ops.prims.convert_element_type.default]
