"""normalize_dims: negative ``dim`` constants wrap to ``dim % rank`` (not
for unsqueeze, whose ``dim`` may name a new dimension)."""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.passes.normalize_dims import normalize_dims


def _dims(gm, name):
    return [n.args[1] for n in gm.graph.nodes
            if n.op == "call_function" and name in str(n.target)]


def test_negative_dims_wrap_by_rank_of_self():
    def f(x, i, s):
        return x.scatter_add(-1, i, s).softmax(-2).unsqueeze(-1), x.sum(-1)
    gm = make_fx(f, tracing_mode="fake")(torch.zeros(10, 5), torch.zeros(5, 5, dtype=torch.long),
                                         torch.zeros(5, 5))
    gm = normalize_dims(gm)
    assert _dims(gm, "scatter_add") == [1]
    assert _dims(gm, "_softmax") == [0]
    assert _dims(gm, "unsqueeze") == [-1]
    assert _dims(gm, "sum") == [[-1]]  # int[] dims are left to torch-mlir
