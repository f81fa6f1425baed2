"""``view(dtype)`` compiles as a bitcast (``passes/bitcast.py``; one of
another width too) and so do the ops PyTorch writes with it:
``signbit`` and ``copysign``, exact for -0.0 and NaN signs."""
from __future__ import annotations

import torch

from e2e_helpers import lazy

NAN, INF = float("nan"), float("inf")
_X = torch.tensor([1.0, -2.0, -0.0, 0.0, NAN, -NAN, INF, -INF, 1e-30])


def _no_fallback(counters):
    import lazy_mlir as lm
    assert not [n for n in lm.metrics.counter_names() if n.startswith("aten::") and counters.delta(n)]


def test_view_dtype_bits_and_back(counters):
    bits = (lazy(_X) * 1).view(torch.int32) + 1
    assert torch.equal(bits.cpu(), _X.view(torch.int32) + 1)
    i64 = torch.tensor([1, -2, 2 ** 62])
    assert torch.equal(lazy(i64).view(torch.float64).view(torch.int64).cpu() * 3, i64 * 3)
    _no_fallback(counters)


def test_signbit_and_copysign(counters):
    assert torch.equal(torch.signbit(lazy(_X)).cpu(), torch.signbit(_X))
    mag = torch.arange(9.0) - 4
    torch.testing.assert_close(torch.copysign(lazy(mag), lazy(_X)).cpu(), torch.copysign(mag, _X))
    assert torch.equal(torch.signbit(torch.copysign(lazy(mag), lazy(_X))).cpu(),
                       torch.signbit(torch.copysign(mag, _X)))
    _no_fallback(counters)


def test_width_changing_view_compiles(counters):
    # (flow.tensor.bitcast: the same bytes in another shape; fell back before)
    x = torch.tensor([[1.0, -2.0], [0.1, 3e38]])
    assert torch.equal(lazy(x).view(torch.uint8).cpu(), x.view(torch.uint8))
    u8 = lazy(x).view(torch.uint8) + 1
    assert torch.equal(u8.view(torch.int16).view(torch.float32).cpu(),
                       (x.view(torch.uint8) + 1).view(torch.float32))
    _no_fallback(counters)


def test_as_strided_of_a_dtype_view_reads_the_storage(counters):
    """An ``as_strided`` addresses the storage in the dtype of its input: of
    a ``view(int32)`` of an empty narrow of a float32 tensor it read past the
    narrow's 0 elements (the graph failed, and its eager fallback raised;
    fuzzer seed 800193); of one over a wider dtype it is the storage's bytes
    as that dtype, up to the last whole element (eager's bounds)."""
    import lazy_mlir as lm

    def program(x, h):
        return [x.reshape(4, 1, 1).narrow(1, 0, 0).view(torch.int32).as_strided((3,), (1,), 1),
                x.view(torch.int32).as_strided((2,), (2,), 1),
                h.narrow(0, 0, 4).view(torch.int32).as_strided((2,), (1,), 0),
                h.narrow(0, 0, 2).view(torch.float16).as_strided((2, 2), (1, 2), 1)]
    x, h = torch.arange(4.0), torch.arange(5, dtype=torch.int16)
    got = program(lazy(x), lazy(h))
    lm.mark_step()
    for g, w in zip(got, program(x, h)):
        assert torch.equal(g.cpu(), w), (g.cpu(), w)
    assert counters.delta("EagerGraph") == 0
    _no_fallback(counters)


def _as_strided_of_an_int_view(x):
    return [x.narrow(1, 0, 0).view(torch.int32).as_strided((3,), (1,), 1)]


def _as_strided_after_a_write_through_an_int_view(x):
    x.view(torch.int64).chunk(3)[2].add_(5)
    return [x.permute((0,)).as_strided((2,), (1,), 1), x]


def test_as_strided_across_a_dtype_view_compiles():
    """torch-mlir's importer indexes the tensor that made an as_strided's
    storage, across view(dtype)s: it read float32 elements for an as_strided
    of a view(int32) (torch.compile ran the graph eagerly, fuzzer seed
    800193) and int64 ones for an as_strided of a float64 storage written
    through its view(int64) (lm.jit raised, seed 801059)."""
    import lazy_mlir as lm
    from e2e_helpers import Counters, compiled_like_eager
    compiled_like_eager(_as_strided_of_an_int_view, lambda: [torch.arange(4.0).reshape(4, 1, 1)])
    compiled_like_eager(_as_strided_after_a_write_through_an_int_view,
                        lambda: [torch.tensor([1.5, -2.0, 3.25], dtype=torch.float64)])
    c = Counters()
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float64)
    got = lm.jit(_as_strided_after_a_write_through_an_int_view).lower(x.clone()).compile()(x.clone())
    want = _as_strided_after_a_write_through_an_int_view(x.clone())
    assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)
    assert not c.fell_back()
