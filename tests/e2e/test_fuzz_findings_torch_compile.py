"""Regression tests of what the differential fuzzer (tests/fuzz/) found in
``torch.compile(backend="lazy_mlir")``, each the shrunk program of its
finding, compared with eager PyTorch and checked compiled."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm

from e2e_helpers import Counters, compiled_like_eager
from lazy_mlir.targets import host_cpu_flags

# Graphs of bf16 tensors whose torch.compile module IREE 3.13 cannot link on
# a CPU without AVX512_BF16 (an elementwise dispatch calls __truncsfbf2,
# which its linker lacks; passes/bf16_casts.py removes the other calls): they
# run eagerly there, counted, with eager's values.
_NATIVE_BF16 = pytest.mark.skipif("avx512_bf16" not in host_cpu_flags(),
                                  reason="IREE 3.13 links no __truncsfbf2 for this CPU")


def test_dynamo_graph_with_a_0d_half_constant():
    """A torch.compile graph holding a 0-d float16 constant (``v[-1] = 2.0``):
    hashing the constant viewed a 0-d tensor as bytes and the backend
    raised."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()

    def fn(v):
        v[-1] = 2.0
        return v * 3

    torch._dynamo.reset()
    c = Counters()
    x = torch.tensor([1.5, 0.5], dtype=torch.float16)
    got = torch.compile(fn, backend="lazy_mlir")(x.clone())
    assert torch.equal(got, fn(x.clone())) and c.delta("DynamoEagerGraph") == 0


def test_torch_compile_copy_of_a_mutated_argument_keeps_its_value():
    """IREE folds a copy of an argument into the argument itself; the
    backend returned the caller's tensor for it, and aot_autograd then wrote
    the argument's in-place update into it: the copy changed too (silent;
    fuzzer seed 400186)."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()
    torch._dynamo.reset()

    def fn(x):
        kept = torch.zeros_like(x)
        kept.copy_(x)
        x.masked_fill_(x > 3, 1)
        return [x, kept]
    x0 = torch.arange(6, dtype=torch.int32)
    want = fn(x0.clone())
    compiled = torch.compile(fn, backend="lazy_mlir")
    for _ in range(2):  # (the first call may run eagerly while compiling)
        got = compiled(x0.clone())
        assert all(torch.equal(g, w) for g, w in zip(got, want)), got


@_NATIVE_BF16
def test_torch_compile_scatter_into_a_tensor_read_elsewhere():
    """A scatter's destination also read by another op: IREE missed the copy
    it needed (the uses met through a reshape of its own) and ran the
    scatter first, so ``p0_v3`` came back computed from the written tensor
    (silent; fuzzer seeds 400128 and 400151, the two programs in one graph
    as the fuzzer batched them)."""
    def fn(p0_v0, p1_v0):
        dev = p0_v0.device
        p0_v0.abs_()
        torch.clamp(p0_v0, 0, 3, out=p0_v0)
        p0_v1 = torch.where(p0_v0 > 0, p0_v0, p0_v0)
        p0_v0.abs_()
        p0_v2 = p0_v1.unsqueeze(0)
        p0_v1.clamp_(1, 4)
        p0_v2.clamp_(7, 10)
        p0_v3 = torch.bitwise_and(p0_v2, p0_v0)
        p0_v2.index_put_((torch.tensor([0], device=dev),),
                         torch.ones((1,), dtype=torch.int32, device=dev))
        p1_v1 = p1_v0.unsqueeze(2)
        p1_v2, p1_v3 = torch.max(p1_v1, -2)
        p1_v0.add_(p1_v0)
        p1_v4 = torch.stack([p1_v0, p1_v0], 0)
        p1_v0.scatter_(0, torch.tensor([0], device=dev).reshape((1, 1)).expand((1, 3)),
                       torch.ones((1, 3), dtype=torch.bfloat16, device=dev))
        return [p0_v0, p0_v1, p0_v2, p0_v3, p1_v0, p1_v1, p1_v2, p1_v3, p1_v4]
    compiled_like_eager(fn, lambda: [torch.tensor(14, dtype=torch.int32),
                                      torch.tensor([[1.5, -2.0, 3.875]], dtype=torch.bfloat16)])


def test_torch_compile_where_of_an_argument_then_written():
    """``where(c, x, x)`` folds to ``x``: the backend returned the caller's
    ``x`` for it, and aot_autograd's epilogue then wrote ``x.mul_(2)`` into
    it (silent; fuzzer seed 400297, fixed with seed 400186's cause)."""
    def fn(v0, v1):
        v3 = torch.where(v0 > 0, v0, v0)
        with torch.no_grad():
            v0.mul_(2)
        return [v0, v1, v3]
    compiled_like_eager(fn, lambda: [torch.tensor([[[1.5, -2.0, 3.0, 1.0, 2.0]]] * 2),
                                      torch.ones(5, 4, dtype=torch.uint8)])


def test_torch_compile_as_strided_compiles():
    """aot_autograd calls the backend inside its fake mode; torch-mlir's
    as_strided rewrite made a fake value there of the graph's own mode
    ("Mixing fake modes NYI") and every graph holding an ``as_strided`` ran
    eagerly (fuzzer seeds 700021, 700039, 700046)."""
    def fn(v0, v1):
        v0[0] = 1
        return [v0, v0.as_strided((2,), (3,), 5), v1.split(1, -1)[1].as_strided((2, 1), (0, 0), 1)]
    compiled_like_eager(fn, lambda: [torch.arange(9.0).reshape(3, 3), torch.arange(8.0).reshape(4, 2)])


def test_torch_compile_bytes_written_through_a_bool_tensors_byte_view():
    """A byte other than 0 or 1 written through a uint8 view of a bool
    tensor came back 1 (a graph's bools are i1; silently, fuzzer seed
    800152): such a graph runs eagerly, eager's bytes kept. A uint8 input
    viewed as bool still compiles."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()

    def written(x):
        b = torch.logical_and(x, x)
        u = b.view(torch.uint8)
        u.sub_(2)
        return [b, u]

    def read(m):
        return [m.view(torch.bool) & (m.view(torch.bool))]
    x = torch.tensor([3, 0, 5])
    torch._dynamo.reset()
    c = Counters()
    got = torch.compile(written, backend="lazy_mlir")(x.clone())
    assert all(torch.equal(g, w) for g, w in zip(got, written(x.clone())))
    assert c.delta("DynamoEagerGraph") >= 1
    compiled_like_eager(read, lambda: [torch.tensor([1, 0, 1], dtype=torch.uint8)])


def _unbind_of_an_empty_slice(x):
    return list(x[:, :, -3:0].unbind(1))


def _add_into_an_empty_unfold(x):
    w = x.flatten()[1:2].unfold(0, 0, 2).squeeze(-2)
    w.add_(1)
    return [x, w]


def _matmul_over_no_elements(x):
    return [torch.matmul(x.transpose(1, 0), x), x.sum(0), x.sum()]


def test_torch_compile_of_ops_on_empty_tensors_compiles():
    """Ops on empty tensors reached torch-mlir and IREE, which fail them: an
    ``unbind`` of a (0, 2, 0) slice (IREE's extract_slice verifier, fuzzer
    seed 800199), an in-place add into an empty unfold of an argument (a
    slice_scatter of nothing: tm_tensor.scatter, seed 800176), a matmul
    over a 0-long dimension (seed 800216); each graph ran eagerly. They are
    computed without the compiler (``frontends/aot_empty``)."""
    compiled_like_eager(_unbind_of_an_empty_slice, lambda: [torch.zeros(0, 2, 4)])
    compiled_like_eager(_add_into_an_empty_unfold, lambda: [torch.tensor(7)])
    compiled_like_eager(_matmul_over_no_elements, lambda: [torch.zeros(0, 3)])


def test_torch_compile_empty_view_after_an_as_strided_compiles():
    """An empty ``narrow`` of an ``as_strided`` output kept its node (every
    empty view stayed where a graph had an ``as_strided``, which may address
    the storage through it), and IREE's verifier refused the slice at the
    end of the dimension ("offset 0 is out-of-bounds"): the graph ran
    eagerly (fuzzer seed 900521). Only views an ``as_strided`` reads
    through keep their node."""
    compiled_like_eager(lambda x: [x.as_strided((1,), (0,), 0).narrow(0, 1, 0)[-1:1:2]],
                        lambda: [torch.tensor([[7, 9]], dtype=torch.uint8)])


def test_torch_compile_as_strided_of_a_view_of_a_0d_argument():
    """An ``as_strided`` of a ``reshape((1,))`` of a 0-d argument: torch-mlir's
    rewrite indexes the 0-d tensor that made the storage, and its lowering
    crashed the compile worker (a double free; the graph ran eagerly, fuzzer
    seed 800336). It is the one element expanded, as of the 0-d tensor."""
    compiled_like_eager(lambda x: [x.reshape((1,)).as_strided((3,), (0,), 0)],
                        lambda: [torch.tensor(1.5)])


def test_torch_compile_as_strided_of_a_chunk_reads_the_whole_storage():
    """An ``as_strided`` of a ``chunk``'s output addresses the chunked
    tensor's storage; torch-mlir's importer stopped at the chunk's output and
    found its elements past it "outside the base tensor" (the graph ran
    eagerly; fuzzer seeds 801220, 801099)."""
    compiled_like_eager(lambda x: [x.chunk(3, -1)[0].as_strided((3, 1), (0, 2), 2)],
                        lambda: [torch.arange(6).reshape(2, 3)])
    compiled_like_eager(lambda x: [x.chunk(2, -2)[1].as_strided((3, 1), (3, 1), 2)],
                        lambda: [torch.arange(12, dtype=torch.int16).reshape(2, 2, 3)])


@_NATIVE_BF16
def test_torch_compile_a_write_through_an_overlapping_as_strided_view_compiles():
    """Fuzzer seed 801346: ``v1.as_strided((2, 2), (3, 3), 0).add_(0.5)``
    (the view sees storage element 3 twice) is functionalized by
    torch.compile into ``add`` and ``as_strided_scatter``, which was kept
    for an overlapping view and failed to lower ("failed to legalize
    torch.constant.int"): the graph ran eagerly. It now writes at each
    position the element eager's kernel writes last, so it gives
    torch.compile's own value (aot_eager's: element 3 added once, where
    eager's in-place add over the overlap adds twice), compiled."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()

    def fn(v1):
        v2 = v1.as_strided((2, 2), (3, 3), 0)
        v2.add_(0.5)
        return [v1, v2]
    for dtype in (torch.bfloat16, torch.float32):
        make = lambda: (torch.arange(-4, 4) / 8).to(dtype).reshape(2, 2, 2)
        torch._dynamo.reset()
        want = torch.compile(fn, backend="aot_eager")(make())
        torch._dynamo.reset()
        c = Counters()
        got = torch.compile(fn, backend="lazy_mlir")(make())
        assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)
        assert c.delta("DynamoEagerGraph") == 0


def test_torch_compile_as_strided_scatter_through_an_overlapping_view():
    """Different values written at one storage position: eager keeps the
    one its copy writes last, and so does the graph (its constants name the
    winner of each position: no order left to IREE's scatter)."""
    views = [((4,), (2, 3), (1, 1), 0), ((3, 3), (3, 3), (1, 2), 0),
             ((2, 3, 4), (4, 3), (1, 4), 2), ((6,), (2, 2, 2), (1, 1, 1), 0)]
    for shape, size, stride, offset in views:
        def fn(x, s, size=size, stride=stride, offset=offset):
            return [torch.as_strided_scatter(x, s, size, stride, offset)]
        for dtype in (torch.float32, torch.int64, torch.bool):
            def make(shape=shape, size=size, dtype=dtype):
                n, m = torch.Size(shape).numel(), torch.Size(size).numel()
                if dtype == torch.bool:
                    return torch.zeros(shape, dtype=dtype), torch.arange(m).reshape(size) % 2 == 1
                return -torch.arange(n).reshape(shape).to(dtype), \
                    (torch.arange(m).reshape(size) + 100).to(dtype)
            compiled_like_eager(fn, make)


def test_torch_compile_scatter_of_ones_into_an_argmin_read_elsewhere():
    """The scatter's indices come to an ``insert_slice`` whose destination
    gets a copy of its own (read elsewhere, 801224's rule) and whose source
    a ``linalg.generic`` of no inputs makes: IREE 3.13 inserted that
    generic's initial values, and ``v7`` lost the written one (silent;
    fuzzer seed 802320). The source now goes behind a barrier, as a
    scatter's made updates do (seed 800256)."""
    def fn(v0):
        v2 = torch.where(v0 > 0, v0, v0)
        v5, v6 = torch.min(v2, -2)
        v7 = torch.add(v6, v6)
        v7.scatter_(0, torch.tensor([1], device=v0.device).reshape((1, 1)).expand((1, 2)),
                    torch.ones((1, 2), dtype=torch.int64, device=v0.device))
        return [v2, v5, v6, v7]
    g = torch.Generator().manual_seed(5616240)
    x = (torch.randint(-32, 33, (12,), generator=g) / 8).reshape(2, 3, 2)
    compiled_like_eager(fn, lambda: [x.clone()])


def _constant(value, dtype):
    return torch.full((3,), value, dtype=dtype)


@pytest.mark.parametrize("fn", [
    lambda x: torch.remainder(_constant(-3.5, torch.float32), 2) + x,
    lambda x: torch.remainder(_constant(-7, torch.int64), 2) + x,
    lambda x: torch.remainder(_constant(7, torch.int64), -2) + x,
    lambda x: torch.fmod(_constant(-3.5, torch.float32), 2) + x,
    lambda x: torch.fmod(_constant(-7, torch.int32), 2) + x,
    lambda x: (_constant(2, torch.int8) // -3) + x,
    lambda x: torch.div(_constant(-7, torch.int32), 2, rounding_mode="floor") + x,
    lambda x: (_constant(-7, torch.int16) // 2) + x,
], ids=["remainder_float", "remainder_int", "remainder_by_negative", "fmod_float", "fmod_int",
        "floor_int8", "floor_int32", "floor_int16"])
def test_torch_compile_remainder_of_a_constant_by_a_number(fn):
    """torch-mlir folds ``remainder.Scalar`` of a constant tensor with C's
    fmod: ``torch.full((3,), -3.5) % 2`` gave -1.5 for eager's 0.5,
    silently; ``fmod.Scalar``'s fold left a literal that did not legalize
    (the graph ran eagerly); its fold of a floor division of integers
    narrower than int64 truncates (``full_like(x, 2) // -3`` of int8 gave
    0 for -1, silently: fuzzer seed 900251)."""
    compiled_like_eager(fn, lambda: (torch.tensor([1.0, -2.0, 3.0]),))


@pytest.mark.parametrize("fn", [
    lambda x: torch.remainder(5.5, x),
    lambda x: torch.bitwise_and(6, x.long()),
    lambda x: torch.bitwise_or(True, x > 0),
    lambda x: torch.bitwise_xor(9, x.int()),
    lambda x: torch.bitwise_left_shift(3, x.long().abs()),
    lambda x: torch.bitwise_right_shift(-64, x.long().abs()),
], ids=["remainder", "and", "or_bool", "xor_int32", "left_shift", "right_shift"])
def test_torch_compile_number_op_tensor_compiles(fn):
    """``op.Scalar_Tensor`` (a number first) is not in the torch dialect:
    each graph failed to compile and ran eagerly."""
    compiled_like_eager(fn, lambda: (torch.tensor([1.0, -2.0, 3.0]),))


@pytest.mark.parametrize("fn", [
    lambda v: v.narrow(-1, 0, 3).view(torch.bool),
    lambda v: v[0].view((1,)).view(torch.bool),
    lambda v: v.view(2, 2).t().view(torch.bool),
], ids=["narrow", "select_then_view", "transposed"])
def test_torch_compile_bool_view_of_a_view_of_an_input_compiles(fn):
    """A bool view of a view of a uint8 input reads the input's bytes, as a
    bool view of the input itself does: it ran eagerly as if the bytes were
    computed (fuzzer seeds 900027, 900291)."""
    compiled_like_eager(fn, lambda: (torch.tensor([3, 0, 1, 0], dtype=torch.uint8),))


@pytest.mark.parametrize("workers", ["0", "1"])
def test_torch_compile_as_strided_of_an_unbind_output_reads_the_unbound_tensor(workers):
    """``v.unbind(0)[0].as_strided((1,), (0,), 1)`` addresses the unbound
    tensor's element 1; the 0-d rule of ``ops/lowering.as_strided`` read the
    0-d output itself: a compile worker gets the graph's specs without their
    shared storage (fuzzer seed 900375: 1.0 for eager's 2.0, silently). The
    base is found in the front end now. In a child process, to have a worker."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    code = """
import torch, lazy_mlir as lm
from lazy_mlir.frontends import dynamo
dynamo.register()
fn = lambda v: [torch.square(v.unbind(0)[0].as_strided((1,), (0,), 1)),
                v.unbind(0)[2].as_strided((2,), (1,), 0)]
x = torch.tensor([1.0, 2.0, 3.0, 4.0])
got, want = torch.compile(fn, backend="lazy_mlir")(x), fn(x)
assert all(torch.equal(g, w) for g, w in zip(got, want)), (got, want)
assert lm.metrics.counter_value("DynamoEagerGraph") == 0
"""
    env = {**os.environ, "LAZY_MLIR_COMPILE": "wait", "LAZY_MLIR_COMPILE_WORKERS": workers,
           "LAZY_MLIR_CACHE": "0"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8])
def test_torch_compile_divides_constant_integers_signed(dtype):
    """Two fills are constants in a Dynamo graph, and torch-mlir's folder of
    an integer ``div.Tensor_mode`` divides them unsigned and floors by
    truncating: ``div(full(7), full(-2), rounding_mode="trunc")`` gave 0
    for -3 and ``"floor"`` -1 for -4, silently. Now ATen computes them when
    the graph compiles (``frontends/aot_constants``); a constant whose
    elements differ (arange) too, and the remainder of a 0-d constant."""
    def fn(x):
        a = torch.full((3,), 7, dtype=dtype)
        b = torch.full((3,), -2, dtype=dtype)
        r = torch.arange(-6, 6, dtype=dtype)
        return (torch.div(a, b, rounding_mode="trunc") + x, torch.div(a, b, rounding_mode="floor") + x,
                torch.div(r, torch.full((12,), -5, dtype=dtype), rounding_mode="floor") + x[0],
                torch.remainder(torch.full((3,), -7, dtype=dtype), torch.tensor(3, dtype=dtype)) + x)

    compiled_like_eager(fn, lambda: (torch.zeros(3, dtype=dtype),))


def test_torch_compile_remainder_of_constant_floats_takes_the_divisors_sign():
    def fn(x):
        return torch.remainder(torch.full((3,), -3.5), torch.tensor(2.0)) + x, \
            torch.fmod(torch.full((3,), -3.5), torch.tensor(2.0)) + x

    compiled_like_eager(fn, lambda: (torch.zeros(3),))


@pytest.mark.parametrize("written", ["computed", "argument"])
def test_torch_compile_bool_scatter_into_a_slice(written):
    """Fuzzer seed 940001: ``maximum(b, b).split(3)[1].scatter_(...)`` on a
    bool tensor. torch-mlir's i1 scatter (indices and updates from one
    two-result generic) lost the update in IREE 3.13, silently; into a slice
    of an argument iree-compile failed and the graph ran eagerly. Bool
    scatters now scatter bytes (``ops/lowering.scatter_bool``)."""
    def fn(b):
        v = torch.maximum(b, b) if written == "computed" else b
        _, tail = v.split(3, 0)
        tail.scatter_(0, torch.tensor([0]), torch.ones((1,), dtype=torch.bool))
        tail.scatter_(0, torch.tensor([1]), False)
        return v, tail

    compiled_like_eager(fn, lambda: (torch.tensor([True, False, False, False, True]),))


@pytest.mark.parametrize("shape,dims", [((), (0,)), ((1, 3, 1), (0, 1, -1))])
def test_torch_compile_index_put_into_a_flip_along_unit_dims(shape, dims):
    """Fuzzer seed 960805: a 0-d argument written through ``flatten()``,
    then ``index_put_`` into its flip. torch-mlir's flip of a one-element
    dimension (a ``tensor.extract`` over a zero fill), folded by IREE 3.13,
    came back as the fill's 0, silently. Such dims are no longer flipped
    (``ops/lowering.flip``); a longer one still is."""
    def fn(v0):
        v1 = v0.flatten()
        v1[0] = 1
        v2 = torch.flip(v0.view(shape) if shape else v1, dims if shape else (0,))
        v2.index_put_((torch.tensor([0, 0, 0]),), torch.ones(3, *v2.shape[1:]))
        return v0, v1, v2

    compiled_like_eager(fn, lambda: (torch.arange(-2.5, -2.5 + max(1, len(shape))).view(shape),))


@pytest.mark.parametrize("fn", [
    lambda v: [v[0], v[0].reshape(1, 1), v[0].reshape(1, 1).double()],
    lambda v: [v.bool().split(1)[1].view(1, -1), torch.mul(v.bool().split(1)[1].view(1, -1),
                                                          v.bool()[1])],
    lambda v: [v[-2].reshape(1, -1).to(torch.int16), v[1:2, None]],
    lambda v: [v.bool(), torch.roll(v.bool(), 11, 0), torch.roll(v.bool(), 11, 0)[1:3:2].reshape(-1, 1)],
    lambda v: [v[1:2], torch.cat([v[1:2].double(), -v[2:3].double()]).view(2, 1)],
], ids=["select_kept", "bool_split", "select_then_reshape", "roll_then_slice",
        "through_a_cast_and_a_cat"])
def test_torch_compile_one_element_slice_given_unit_dimensions(fn):
    """A one-element slice given unit dimensions: IREE 3.13 moved the
    expansion through the slice into one of a higher rank than its source
    and failed to compile; the graph ran eagerly (fuzzer seeds 902529,
    940189, 940199, 970299). ``passes/element_slices`` reads their elements."""
    compiled_like_eager(fn, lambda: (torch.tensor([3, 0, 1], dtype=torch.int32),))


def test_a_step_along_a_unit_dimension_compiles():
    """Fuzzer seed 980073: ``v[:, 0:1:3]`` slices with stride 3 a dimension
    it takes one element of; a later slice of it (a roll) failed in IREE
    3.13 ("mismatch of result layout"). The graph ran eagerly under
    torch.compile and ``lm.jit`` raised; ``passes/unit_strides`` steps by 1
    there."""
    def fn(v):
        return [v[:, 0:1:3], torch.roll(v[:, 0:1:3], 1, 0)]

    compiled_like_eager(fn, lambda: (torch.arange(20.0).reshape(5, 1, 4),))
    v = torch.arange(20.0).reshape(5, 1, 4)
    got = lm.jit(fn).lower(v).compile()(v)
    assert all(torch.equal(g, w) for g, w in zip(got, fn(v)))


def test_an_integer_tensor_to_a_bool_power_compiles():
    """Fuzzer seed 960466: ``pow(i, True)`` reached torch-mlir as an integer
    power it cannot lower ("non-floating point dtype"): the graph ran
    eagerly. It is the repeated product of integer powers now. (A bool
    tensor to a bool power still runs eagerly: eager's type is bool, the
    meta kernel's int64, as on the lazy device.)"""
    def fn(i):
        return [torch.pow(i, True), torch.pow(i, False), torch.pow(i.to(torch.uint8), True)]

    make = lambda: (torch.tensor([2, -3, 0, 7], dtype=torch.int32),)  # noqa: E731
    compiled_like_eager(fn, make)
    assert [t.dtype for t in torch.compile(fn, backend="lazy_mlir")(*make())] == \
        [t.dtype for t in fn(*make())]
