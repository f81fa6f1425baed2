"""The copy a scatter's destination gets (``linalg_edit.copy_before``) is
never a constant, whatever it copies."""
from __future__ import annotations

import torch

from e2e_helpers import compiled_like_eager


def _zero_then_write_and_argmax(x, y):
    """Fuzzer seeds 801400 and 801402 in one graph, shrunk: writes through an
    ``unfold`` of a 0-d argument (each a scatter-add into zeros; the zeros
    constant, read by both, is copied for each), and an argmax beside."""
    v = x.reshape((1,)).unfold(0, 1, 1)
    v.zero_()
    v[0] = 2
    return [x, y.argmax(-1)]


def test_a_copy_of_zeros_scattered_into_is_not_a_constant():
    """The copy selected between each element and a constant zero: for a
    copy of zeros the select folded, the copy became a constant, and IREE
    3.13 computed the scatter at load time in place in a constant buffer it
    packed with the argmax's zeros, then read the two back swapped (``x``
    came back 0 and the argmax 2, for 2 and 0, under torch.compile,
    silently). Each element type the copy takes (its zero made in the copy's
    body: IREE's host code has no float16 constants)."""
    for dtype in (torch.int64, torch.bool, torch.float16, torch.bfloat16, torch.float64):
        compiled_like_eager(_zero_then_write_and_argmax,
                            lambda: (torch.tensor(-13).to(dtype), torch.tensor([-12])))
