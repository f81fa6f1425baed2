"""Advanced indexing with negative indices (counted from the end, as in
eager) compiles and matches eager: torch-mlir's lowering used them as raw
offsets and read or wrote outside the tensor (``index_decompositions.py``).
Also: batch norm in eval mode saves no statistics, as eager's CPU kernels."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import assert_lazy_close, lazy


def _no_fallback(counters):
    fell_back = [n for n in lm.metrics.counter_names()
                 if n.startswith("aten::") and counters.delta(n)]
    assert not fell_back, fell_back


def test_read_and_write_with_negative_indices(counters):
    counters.snapshot()
    x = torch.arange(24.0).reshape(4, 6)
    rows, cols = torch.tensor([0, -1, -4, 2]), torch.tensor([-1, 0, -6, 5])
    vals = torch.tensor([10.0, 20.0, 30.0, 40.0])

    def program(x, rows, cols, vals):
        gathered = x[rows, cols]
        picked_rows = x[rows]
        y = x.clone()
        y[rows, cols] = vals
        z = torch.zeros(6, dtype=x.dtype, device=x.device)
        z.index_put_((cols,), vals, accumulate=True)  # -1 and 5 are one slot: summed
        flags = torch.zeros(6, dtype=torch.bool, device=x.device)
        flags[cols] = True  # bool data: chains to the bool index_put rewrite
        return gathered, picked_rows, y, z, flags

    outs = program(*(lazy(t) for t in (x, rows, cols, vals)))
    lm.mark_step()
    for o, e in zip(outs, program(x, rows, cols, vals)):
        assert_lazy_close(o, e)
    _no_fallback(counters)


def test_batch_norm_eval_saves_no_statistics(counters):
    counters.snapshot()
    x, w, b = torch.randn(3, 2, 4), torch.rand(2) + 0.5, torch.randn(2)
    mean, var = torch.randn(2), torch.rand(2) + 0.5
    aten = torch.ops.aten
    calls = [
        lambda *a: aten.native_batch_norm.default(*a, False, 0.1, 1e-5),
        lambda *a: aten._native_batch_norm_legit.default(*a, False, 0.1, 1e-5),
        lambda *a: aten._native_batch_norm_legit_no_training.default(*a, 0.1, 1e-5),
    ]
    for call in calls:
        expected = call(x, w, b, mean.clone(), var.clone())
        actual = call(*(lazy(t) for t in (x, w, b, mean, var)))
        lm.mark_step()
        assert [tuple(o.shape) for o in actual] == [tuple(o.shape) for o in expected] \
            == [(3, 2, 4), (0,), (0,)]
        assert_lazy_close(actual[0], expected[0])
    _no_fallback(counters)
