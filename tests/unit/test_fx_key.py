"""``compile_service.fx_key.fx_content_key``: one key for one computation,
whatever its nodes are called; another for anything a module depends on."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.compile_service.fx_key import fx_content_key


def _traced(fn, *shapes, dtype=torch.float32):
    return make_fx(fn, tracing_mode="fake")(*[torch.empty(s, dtype=dtype) for s in shapes])


def f(a, b):
    return (torch.tanh(a @ b) * 2,)


def test_same_computation_same_key_whatever_the_names():
    one, two = _traced(f, (3, 4), (4, 5)), _traced(f, (3, 4), (4, 5))
    for i, node in enumerate(two.graph.nodes):
        if node.op != "output":
            node.name = f"renamed_{i}"
    two.recompile()
    assert fx_content_key(one) == fx_content_key(two) is not None


def test_shapes_dtypes_scalars_and_ops_change_the_key():
    base = fx_content_key(_traced(f, (3, 4), (4, 5)))
    others = {fx_content_key(_traced(f, (3, 4), (4, 6))),
              fx_content_key(_traced(f, (3, 4), (4, 5), dtype=torch.float64)),
              fx_content_key(_traced(lambda a, b: (torch.tanh(a @ b) * 3,), (3, 4), (4, 5))),
              fx_content_key(_traced(lambda a, b: (torch.sin(a @ b) * 2,), (3, 4), (4, 5)))}
    assert base not in others and len(others) == 4


def test_a_module_holding_constants_has_no_key():
    gm = _traced(f, (3, 4), (4, 5))
    gm.register_buffer("w", torch.ones(5))
    with gm.graph.inserting_before(list(gm.graph.nodes)[0]):
        gm.graph.get_attr("w")
    assert fx_content_key(gm) is None
