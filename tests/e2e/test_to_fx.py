"""``pipeline/fx_graph.to_fx``: the fx module of a captured graph, made on
every cache miss (each new size of a graph, issue 53)."""
from __future__ import annotations

import torch

from lazy_mlir.pipeline.fx_graph import to_fx
from e2e_helpers import captured_backward_graph as _captured


def test_metadata_is_made_without_dispatching_an_op(monkeypatch):
    """Each node's ``meta["val"]`` is a fake tensor built directly: an
    ``empty_strided`` under the fake mode per node was half of ``to_fx``."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    graph = _captured(monkeypatch)
    dispatched = []
    original = FakeTensorMode.__torch_dispatch__

    def count(self, func, *args, **kwargs):
        dispatched.append(func)
        return original(self, func, *args, **kwargs)
    monkeypatch.setattr(FakeTensorMode, "__torch_dispatch__", count)
    gm = to_fx(graph)
    monkeypatch.undo()
    assert not dispatched, dispatched[:5]
    vals = [n.meta["val"] for n in gm.graph.nodes if n.op in ("placeholder", "call_function")
            and isinstance(n.meta.get("val"), torch.Tensor)]
    assert vals and all(isinstance(v, FakeTensor) and v.device.type == "cpu" for v in vals)
    inputs = [torch.randn(d.spec.shape, dtype=d.spec.dtype) if d.spec.dtype.is_floating_point
              else torch.zeros(d.spec.shape, dtype=d.spec.dtype) for d in graph.inputs]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    for got, node in zip(gm(*inputs), output.args[0]):
        want = node.meta["val"]
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
