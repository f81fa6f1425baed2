"""Writes through a bool mask (``x[mask] = v``, ``index_put_`` with a mask,
``accumulate=True``) match eager: torch-mlir lowers the mask as a
dynamic-length ``nonzero`` whose write broadcast the values wrongly (an
all-False mask added them into a row, or wrote outside the tensor); a single
mask is now a ``where`` (``dialects/index_decompositions.py``)."""
from __future__ import annotations

import torch

from e2e_helpers import same_as_eager

NAN, INF = float("nan"), float("inf")


def _writes(x, rows, cells, row_vals, scalar_like):
    outs = []
    for accumulate in (False, True):
        outs.append(torch.index_put(x, (rows,), row_vals, accumulate=accumulate))
        outs.append(torch.index_put(x, (cells,), scalar_like, accumulate=accumulate))
        col_vals = torch.cat([row_vals, row_vals[:1]])[:, None]  # one per row, across columns
        outs.append(torch.ops.aten.index_put(x, [None, rows[:5]], col_vals, accumulate))
    y = x.clone()
    y[cells] = 7.0  # the Python spelling: index_put_ with a 0-d value
    z = x.clone()
    z[rows] += row_vals  # read-modify-write: x[rows] reads through a mask (eager), += writes
    return (*outs, y, z)


def test_mask_writes_match_eager():
    x = torch.tensor([[1.0, -0.0, NAN, 4.0, INF], [-1.0, 2.5, 0.0, -INF, 3.0],
                      [0.5, 1.5, -2.0, 8.0, -0.0], [9.0, NAN, 1.0, 2.0, 3.0],
                      [4.0, 4.0, 4.0, 4.0, 4.0], [-3.0, 0.0, 6.0, 1.0, 2.0]])
    row_vals = torch.tensor([10.0, -0.0, NAN, 0.25, -INF])
    for rows in (torch.tensor([True, False, True, False, True, False]),
                 torch.zeros(6, dtype=torch.bool), torch.ones(6, dtype=torch.bool)):
        cells = x > 1.0
        same_as_eager(_writes, x, rows, cells, row_vals, torch.tensor(-5.0), exact=True)


def test_integer_mask_accumulate_with_all_false_mask():
    """The OpInfo sample that gave a wrong answer (int64) and crashed (float32)."""
    x = torch.arange(-12, 13).reshape(5, 5)
    for dtype in (torch.int64, torch.float32):
        xs = x.to(dtype)
        vals = torch.tensor([1, -7, -4, -6, -7]).to(dtype)
        same_as_eager(lambda a, m, v: torch.index_put(a, (m,), v, accumulate=True),
                      xs, torch.zeros(5, dtype=torch.bool), vals, exact=True)


def test_values_one_per_selected_element_compile():
    # The backward of w[mask] writes one gradient row per selected element:
    # torch-mlir's nonzero made a scatter IREE rejected ("mismatch in shape of
    # indices and update value"), and the whole graph ran eagerly. Now a
    # gather by rank (ops/index.py _by_rank).
    import lazy_mlir as lm
    from e2e_helpers import Counters

    def grads(device):
        torch.manual_seed(0)
        w = torch.randn(6, 3, device=device, requires_grad=True)
        mask = torch.tensor([True, False, True, True, False, True], device=device)
        (w[mask] * 2 + w[mask] ** 2).sum().backward()
        x = torch.zeros(6, 2, device=device)
        x[mask] += torch.arange(8.0, device=device).reshape(4, 2)
        y = torch.zeros(2, 6, device=device)
        y[:, mask] = torch.arange(8.0, device=device).reshape(2, 4)
        return [t.cpu() for t in (w.grad, x, y)]

    eager = grads("cpu")
    c = Counters()
    lazy = grads("lazy")
    for a, b in zip(lazy, eager):
        assert torch.equal(a, b)
    assert c.delta("EagerGraph") == 0 and c.fell_back() == ["aten::index"]  # (the read w[mask])
    lm.mark_step()


def test_a_mask_selecting_another_count_than_the_values_raises():
    import pytest
    mask = torch.tensor([True, False, True, True])
    x = torch.zeros(4, device="lazy")
    with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape \\[2\\]"):
        x[mask] = torch.tensor([1.0, 2.0], device="lazy")  # a host mask: at once, as eager
    computed = torch.ones(4, device="lazy").cumsum(0) > 1  # three True, known when run
    x[computed] = torch.tensor([1.0, 2.0], device="lazy")
    with pytest.raises(RuntimeError, match="shape mismatch: value tensor of shape \\[2\\]"):
        x.cpu()
    import lazy_mlir as lm
    with pytest.raises(RuntimeError, match="shape mismatch"):
        lm.mark_step()  # the next sync point raises it once (lazy/bounds.py)
    lm.mark_step()
