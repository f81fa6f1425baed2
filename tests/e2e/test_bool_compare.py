"""A bool tensor compared with a number or a tensor of another dtype gives
eager's answer (``passes/bool_compare``), constant or not, in each mode."""
from __future__ import annotations

import torch

import lazy_mlir as lm
from e2e_helpers import compiled_like_eager


def _where_all_true(v0):
    """Fuzzer seed 802119, shrunk: torch-mlir folded ``t > 0`` of the
    constant all-True ``t`` reading True as -1 (a signed ``i1``)."""
    v6 = torch.full_like(v0, True)
    return [torch.where(v6 > 0, v6, v0)]


def _compared(v0):
    """Constant bools against numbers (folded), and a bool against a number
    the lazy device lifts to an int64 input (lowered with the int64 made
    bool: ``v0 > -1`` was False everywhere)."""
    ones, zeros = torch.ones_like(v0), torch.zeros_like(v0)
    return [ones > 0, ones == 1, ones >= True, zeros > -1, ones < 2, v0 > -1, v0 <= -1,
            v0 == torch.tensor(1, device=v0.device), v0 < torch.tensor(0.5, device=v0.device)]


def _make():
    return (torch.tensor([False, True, False, False]).reshape(1, 1, 4),)


def test_bool_comparisons_under_lm_jit():
    for fn in (_where_all_true, _compared):
        got = lm.jit(fn).lower(*_make()).compile()(*_make())
        want = fn(*_make())
        assert all(torch.equal(g, w) for g, w in zip(got, want)), (fn.__name__, got, want)


def test_bool_comparisons_under_torch_compile():
    for fn in (_where_all_true, _compared):
        compiled_like_eager(fn, _make)


def test_bool_comparisons_on_the_lazy_device():
    (x,) = _make()
    want = _compared(x) + _where_all_true(x)
    got = _compared(x.to("lazy")) + _where_all_true(x.to("lazy"))
    lm.mark_step()
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want)), (got, want)
