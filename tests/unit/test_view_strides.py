"""``ops.restride.view_strides`` agrees with ATen's ``view`` on which
reshapes of a strided tensor are views, and with which strides."""
from __future__ import annotations

import itertools

import torch

from lazy_mlir.ops.restride import view_strides


def _shapes(n: int):
    """Every shape of ``n`` elements with up to three dimensions."""
    yield [n]
    for a in range(1, n + 1):
        if n % a == 0:
            yield [a, n // a]
            for b in range(1, n // a + 1):
                if (n // a) % b == 0:
                    yield [a, b, n // a // b]


def test_view_strides_match_aten():
    base = torch.empty(2, 3, 4, 1)
    checked = views = 0
    for perm in itertools.permutations(range(4)):
        t = base.permute(perm)
        for tensor in (t, t[:1], t.narrow(2, 0, 1), t[..., ::2] if t.shape[-1] > 1 else t):
            for new in _shapes(tensor.numel()):
                got = view_strides(tensor.shape, tensor.stride(), new)
                try:
                    view = tensor.view(new)
                except RuntimeError:
                    assert got is None, (tensor.shape, tensor.stride(), new, got)
                    continue
                assert got is not None, (tensor.shape, tensor.stride(), new)
                # the stride of a size-1 dimension is free
                assert [s for s, k in zip(got, new) if k != 1] == \
                    [s for s, k in zip(view.stride(), new) if k != 1]
                views += 1
            checked += 1
    assert checked > 90 and views > 500
