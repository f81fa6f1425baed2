"""Regression tests of what the differential fuzzer (tests/fuzz/) found,
each the shrunk program of its finding, compared with eager PyTorch."""
from __future__ import annotations

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import Counters, compiled_like_eager, lazy


def test_inplace_scalar_overloads_named_apart():
    """``pow_.Scalar`` is ``pow.Tensor_Scalar`` (``pow.Scalar`` is Scalar **
    Tensor): ``x.pow_(2)`` raised at the call; so did ``float_power_`` and
    ``ldexp_``."""
    x0 = torch.tensor([1.5, -2.0, 3.0])
    e = x0.clone()
    e.pow_(2)
    c = Counters()
    x = lazy(x0)
    x.pow_(2)
    f = lazy(x0.double())
    f.float_power_(3)
    m = lazy(x0)
    m.ldexp_(torch.tensor([1, 2, 3]).to("lazy"))
    lm.mark_step()
    assert torch.equal(x.cpu(), e)
    assert torch.equal(f.cpu(), x0.double().float_power_(3))
    assert torch.equal(m.cpu(), x0.clone().ldexp_(torch.tensor([1, 2, 3])))
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_8bit_integer_matmul_compiles_in_process():
    """An int8 or uint8 ``mm``/``bmm`` crashed torch-mlir's lowering, and
    with it the process (lm.jit lowers in the caller's process; so does
    mark_step without compile workers, as here): computed in int32 and
    wrapped back, eager's values."""
    a0 = torch.tensor([[100, -7, 3], [5, 90, -128]], dtype=torch.int8)
    c = Counters()
    for dt in (torch.int8, torch.uint8):
        a = a0.to(dt)
        got = [lazy(a) @ lazy(a).t(), torch.bmm(lazy(a)[None], lazy(a).t()[None])]
        lm.mark_step()
        assert torch.equal(got[0].cpu(), a @ a.t()) and torch.equal(got[1].cpu()[0], a @ a.t())
    jitted = lm.jit(lambda x: x @ x.t()).lower(a0).compile()
    assert torch.equal(jitted(a0), a0 @ a0.t())
    assert not c.fell_back() and c.delta("EagerGraph") == 0


@pytest.mark.parametrize("write", [
    lambda x: x.sub_(x[-1]),                                   # broadcast row of itself
    lambda x: torch.add(x[1:], 1, out=x[:-1]),                 # out= overlapping the input
    lambda x: x[1:].copy_(x[:-1]),                             # shifted copy
    lambda x: x.index_put_((torch.tensor([0], device=x.device),), x[1]),
])
def test_partial_overlap_raises_as_eager(write):
    """An input partly overlapping the tensor written: eager refuses
    ("unsupported operation: some elements of the input tensor and the
    written-to tensor refer to a single memory location"); the lazy device
    computed a value instead."""
    x0 = torch.arange(9.0).reshape(3, 3)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        write(x0.clone())
    x = lazy(x0)
    with pytest.raises(RuntimeError, match="unsupported operation"):
        write(x)
    assert torch.equal(x.cpu(), x0)  # nothing written


def test_memory_order_write_raises_not_a_different_value():
    """Where eager's overlap test gives up (a strided input over the written
    tensor) it computes in memory order, reading what it already wrote; a
    graph reads first: the lazy device refuses rather than differ."""
    x0 = torch.arange(9.0).reshape(3, 3)
    x = lazy(x0)
    with pytest.raises(NotImplementedError, match="memory order"):
        x.mul_(x.t()[0])
    y = lazy(x0)
    y.add_(y.detach())  # the same elements, laid out alike: eager's value
    y[1:].mul_(y[:1].clone())
    e = x0 + x0
    e[1:].mul_(e[:1].clone())
    assert torch.equal(y.cpu(), e)


@pytest.mark.parametrize("write", [
    lambda x, d: x.index_put_((torch.tensor([0], device=d),),
                              torch.ones(1, dtype=torch.bfloat16, device=d)),
    lambda x, d: x.__setitem__(torch.tensor([0], device=d), torch.ones(1, dtype=torch.float64,
                                                                       device=d)),
    lambda x, d: x.index_add_(0, torch.tensor([0], device=d), torch.ones(1, dtype=torch.float64,
                                                                         device=d)),
    lambda x, d: torch.add(x, 1.5, out=torch.zeros(3, dtype=torch.int64, device=d)),
])
def test_write_of_another_dtype_raises_at_the_call(write):
    """Eager refuses an index write whose source has another dtype, and an
    out= tensor that cannot hold the result's dtype; the lazy device wrote a
    converted value (the checks are in eager's CPU kernels, not the meta
    kernels shape inference runs)."""
    with pytest.raises(RuntimeError):
        write(torch.zeros(3), "cpu")
    x = lazy(torch.zeros(3))
    with pytest.raises(RuntimeError):
        write(x, "lazy")
    assert torch.equal(x.cpu(), torch.zeros(3))


def test_integer_power_compiles():
    """``torch.pow`` of an integer tensor failed torch-mlir's lowering ("non-
    floating point dtype") and ran its whole graph eagerly: repeated
    squaring, wrapping as eager does; a bool tensor's, in int64; an integer
    exponent tensor's over every bit of its type."""
    c = Counters()
    got = []
    for dt in (torch.int64, torch.int32, torch.int8, torch.uint8):
        x = torch.tensor([0, 1, -3, 7, 100]).to(dt)
        got += [(torch.pow(lazy(x), e), torch.pow(x, e)) for e in (1, 2, 5, 13)]
    b = torch.tensor([True, False])  # int64 in eager (fuzzer seed 400159: square of bools)
    got += [(torch.square(lazy(b)), torch.square(b)), (torch.pow(lazy(b), 0), torch.pow(b, 0))]
    # integer exponent tensors (seed 700022), negative ones too (0, or +-1 for a base of +-1)
    x = torch.tensor([2, -3, 4, 0, 1, -1, 7, -1, 1, 0, 100])
    y = torch.tensor([3, 0, 2, 5, -1, -3, 13, -4, 40, -2, 7])
    for dt in (torch.int64, torch.int32, torch.int8):
        got += [(torch.pow(lazy(x.to(dt)), lazy(y.to(dt))), torch.pow(x.to(dt), y.to(dt)))]
    got += [(torch.pow(lazy(x.abs().to(torch.uint8)), lazy(y.abs().to(torch.uint8))),
             torch.pow(x.abs().to(torch.uint8), y.abs().to(torch.uint8))),
            (torch.pow(2, lazy(y)), torch.pow(2, y)), (torch.pow(-1, lazy(y)), torch.pow(-1, y))]
    lm.mark_step()
    for a, e in got:
        assert torch.equal(a.cpu(), e)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_jit_returning_its_argument_owns_the_result():
    """``lm.jit`` of a function that returns an argument as it is: the
    module hands the input buffer back, and the result read the argument's
    memory after it was freed (garbage values)."""
    import gc
    m = torch.arange(6.0).reshape(2, 3)
    same = lm.jit(lambda a, b: [a, b]).lower(m, m.t()).compile()
    got = same(m.clone(), m.clone().t())
    gc.collect()
    junk = [torch.full((64, 64), -1.0) for _ in range(8)]  # (reuse the freed memory)
    assert torch.equal(got[0], m) and torch.equal(got[1], m.t()), junk[0][0, 0]


def test_unfold_leaving_a_tail_compiles_as_one_op():
    """``unfold`` whose windows leave the end of the dimension unread, as
    an op of its own in the graph (lm.jit, torch.compile): torch-mlir's
    linalg failed verification and the compile failed."""
    x = torch.arange(5, dtype=torch.int32)
    fn = lm.jit(lambda a: [a.unfold(-1, 4, 2), a.unfold(0, 2, 2)]).lower(x).compile()
    got = fn(x)
    assert torch.equal(got[0], x.unfold(-1, 4, 2)) and torch.equal(got[1], x.unfold(0, 2, 2))


def test_uint8_remainder_and_fmod_are_unsigned():
    """torch-mlir lowered uint8 ``remainder``/``fmod`` as signed (``200 % 3``
    gave 1, as ``-56 % 3``): silent wrong values above 127. A negative
    scalar is converted to uint8 first, as eager converts it."""
    x = torch.tensor([200, 3, 130, 7, 255], dtype=torch.uint8)
    fns = [lambda a: a % 3, lambda a: torch.fmod(a, 3), lambda a: a.remainder(-3),
           lambda a: a.remainder(torch.tensor([7, 2, 129, 3, 254], dtype=torch.uint8,
                                               device=a.device))]
    got = [f(lazy(x)) for f in fns]
    inplace = lazy(x)
    inplace.remainder_(3)
    lm.mark_step()
    for f, g in zip(fns, got):
        assert torch.equal(g.cpu(), f(x))
    assert torch.equal(inplace.cpu(), x % 3)


def test_integer_neg_is_exact():
    """torch-mlir lowered an integer ``neg`` through float (sitofp, negf,
    fptosi): int32 beyond 2**24 and int64 beyond 2**53 came back rounded
    (found as ``view(int32).bitwise_not_()`` then ``neg_()`` of floats)."""
    got = []
    for dt, v in ((torch.int32, 16777217), (torch.int64, 2 ** 53 + 1), (torch.int8, 127)):
        x = torch.tensor([v, -v, 3], dtype=dt)
        got.append((-lazy(x), -x))
    f = torch.tensor([1.5, -2.0, 3.0])
    bits = lazy(f)
    bits.view(torch.int32).bitwise_not_()
    bits.view(torch.int32).neg_()
    lm.mark_step()
    for a, e in got:
        assert torch.equal(a.cpu(), e)
    assert torch.equal(bits.cpu().view(torch.int32), -~f.view(torch.int32))


def test_bool_add_saturates():
    """``True + True`` is True in eager (a bool sum is a logical or); the
    lowering added 1-bit integers and gave False (``b + True``, ``b.add_(c)``)."""
    b0, c0 = torch.tensor([True, False, True]), torch.tensor([True, True, False])
    fns = [lambda b, c: b + True, lambda b, c: b + c, lambda b, c: b + False,
           lambda b, c: b.clone().add_(True)]
    got = [f(lazy(b0), lazy(c0)) for f in fns]
    lm.mark_step()
    for f, g in zip(fns, got):
        assert torch.equal(g.cpu(), f(b0, c0))


def test_as_strided_of_a_0d_tensor_in_process():
    """``as_strided`` of a 0-d tensor to a larger shape (stride 0) made
    torch-mlir free memory twice: lm.jit's lowering aborted the process."""
    x = torch.tensor(1.5, dtype=torch.float64)
    fn = lm.jit(lambda a: [a.as_strided((2, 1), (0, 3), 0)]).lower(x).compile()
    assert torch.equal(fn(x)[0], x.as_strided((2, 1), (0, 3), 0))


def test_uint8_abs_is_the_value():
    """The lowering took uint8 as signed: ``abs`` of 200 gave 56."""
    x = torch.tensor([200, 3, 130], dtype=torch.uint8)
    a = lazy(x).abs()
    b = lazy(x)
    b.abs_()
    lm.mark_step()
    assert torch.equal(a.cpu(), x) and torch.equal(b.cpu(), x)


@pytest.mark.parametrize("call", [
    lambda v: v.sub_(False),                     # bool - bool
    lambda v: torch.sub(v.int(), True),          # int - bool
    lambda v: torch.rsub(v.float(), True),
    lambda v: v.float().bitwise_and_(3),         # bitwise op of floats
    lambda v: v.int().remainder_(0),             # ZeroDivisionError
    lambda v: v.int().pow_(-1),                  # negative integer power
    lambda v: v.mul_(3),                         # Long result into a bool tensor
    lambda v: v.to(torch.uint8)[None] @ v.int()[:, None],  # mm of two dtypes (seed 237)
    lambda v: torch.bitwise_and(v.bfloat16(), -0.25),      # bitwise of bf16 (seed 400237)
    lambda v: torch.lerp(v.long(), v.long(), 0.5),         # integer lerp (its weight lifted)
    lambda v: torch.cumsum(v, 0, out=torch.empty_like(v)),  # a scan into bool (seed 400130)
    lambda v: torch.cumprod(v.long(), 0, dtype=torch.bool),
])
def test_eager_dtype_checks_of_python_numbers(call):
    """A pointwise op given a Python number: eager's CPU kernel refuses these
    dtypes, the meta kernel did not, and the lazy device computed a value
    (``v0.sub_(False)`` of a bool tensor; fuzzer seeds 79, 174, 345)."""
    v0 = torch.tensor([True, False])
    with pytest.raises(RuntimeError) as eager:
        call(v0.clone())
    with pytest.raises(RuntimeError) as got:
        call(lazy(v0))
    assert str(got.value).split("\n")[0] == str(eager.value).split("\n")[0]


def test_eager_result_dtype_where_the_meta_kernel_differs():
    """``pow(bool_t, True)`` is bool in eager and int64 in its meta kernel:
    the lazy device gave int64 (and its graph failed to compile); the op now
    runs eagerly, with eager's dtype and values."""
    v0 = torch.tensor([True, False])
    got = torch.pow(lazy(v0), True)
    lm.mark_step()
    assert got.dtype == torch.bool and torch.equal(got.cpu(), torch.pow(v0, True))


def _fuzz_findings(seed: int) -> list:
    """The fuzzer's findings of the program of ``seed`` on the lazy device
    (for findings whose graph only fails among the program's other ops)."""
    import importlib
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    fuzz_run = importlib.import_module("tests.fuzz.run")
    generate = importlib.import_module("tests.fuzz.gen").generate
    return fuzz_run.check([generate(seed)], modes=("lazy",))


def test_as_strided_reads_the_storage_not_its_input():
    """``as_strided``'s offset and strides address the storage: read from
    its input's value (here an empty narrow of a select, a 0-element tensor
    in the graph) the importer could not map it to base indices, the graph
    ran eagerly, and eager's as_strided of that 0-element tensor raised at
    the sync (fuzzer seed 310). Read from the storage's value now."""
    assert not [f.summary() for f in _fuzz_findings(310)]
    x0 = torch.arange(12.0).reshape(4, 3)
    c = Counters()
    x = lazy(x0)
    got = x[::2].select(1, 0).narrow(0, 2, 0).as_strided((3, 2), (0, 1), 3)
    lm.mark_step()
    assert torch.equal(got.cpu(), x0.as_strided((3, 2), (0, 1), 3))
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_as_strided_of_a_result_laid_out_as_its_transposed_input():
    """``mul`` of a transposed tensor is laid out as its input (strides
    ``(1, 2)``); an ``as_strided`` of it addresses that memory. The storage
    was read as a row-major clone, and ``v7[1]`` came back ``v4[0, 1]``
    instead of ``v4[1, 0]`` (silently; fuzzer seed 800169)."""
    def program(x):
        v3 = x.permute(1, 0).expand(2, 3)
        v4 = torch.mul(v3, v3)
        return [v4, v4.transpose(1, 0).as_strided((2, 1), (1, 1), 0),
                v4.as_strided((3,), (2,), 1)]
    x0 = torch.tensor([[2, 7], [5, 1], [3, 4]], dtype=torch.uint8)
    c = Counters()
    got = program(lazy(x0))
    lm.mark_step()
    for g, w in zip(got, program(x0)):
        assert g.stride() == w.stride() and torch.equal(g.cpu(), w), (g.cpu(), w)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_view_of_an_empty_tensor_does_not_kill_the_process():
    """torch-mlir's lowering of a ``view`` of a tensor with no elements
    divides by zero: SIGFPE, and the process died (torch.compile and lm.jit
    lower in it; fuzzer seed 300075, a ``narrow(0, 3, 0)`` then
    ``view_as``). Such a view is lowered as a new tensor of its shape. Run
    in a child process: the failure is the process's death."""
    import subprocess
    import sys
    from pathlib import Path
    code = ("import sys\nfrom tests.fuzz.gen import generate\nfrom tests.fuzz.run import check\n"
            "found = check([generate(300075, functional=True)], modes=('dynamo',))\n"
            "sys.exit(len(found))\n")
    env = {**__import__("os").environ, "LAZY_MLIR_COMPILE": "wait"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("shape,dim,size,step", [((3, 2), 0, 1, 2), ((2, 7), 1, 2, 3)])
def test_unfold_with_gaps_leaves_its_input_whole(shape, dim, size, step):
    """``unfold`` with ``step > size`` skips elements: lowered as a gather,
    IREE fused the tensor unfolded into it and computed only the elements
    read, so that tensor, returned too, came back with 0s between the
    windows (silent; fuzzer seed 400051, lm.jit)."""
    x0 = torch.arange(torch.Size(shape).numel()).reshape(shape)
    e = x0.clone()
    ew = e.unfold(dim, size, step)
    e.bitwise_xor_(85)
    c = Counters()
    x = lazy(x0)
    w = x.unfold(dim, size, step)
    x.bitwise_xor_(85)
    got, got_w = x.clone(), w.clone()
    lm.mark_step()
    assert torch.equal(got.cpu(), e) and torch.equal(got_w.cpu(), ew)

    def fn(t):
        u = t.unfold(dim, size, step)
        t.bitwise_xor_(85)
        return [t, u]
    jitted = lm.jit(fn).lower(x0.clone()).compile()(x0.clone())
    assert torch.equal(jitted[0], e) and torch.equal(jitted[1], ew)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_compile_graph_forms_the_lazy_device_never_records():
    """torch.compile hands over ``bitwise_xor.Scalar`` (the dialect has the
    ``.Tensor`` overloads only) and a ``cat`` of empty tensors (torch-mlir
    drops them and builds a concat of none): both graphs ran eagerly
    (fallback; fuzzer seeds 400007, 400012, 400039)."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()
    torch._dynamo.reset()

    def fn(a, b, e):
        return a ^ 85, b | 3, torch.cat([e, e], 1)
    args = (torch.tensor([[1, 200]], dtype=torch.uint8), torch.tensor([True, False]),
            torch.zeros(3, 0))
    c = Counters()
    got = torch.compile(fn, backend="lazy_mlir")(*args)
    for g, e in zip(got, fn(*args)):
        assert g.dtype == e.dtype and torch.equal(g, e)
    assert c.delta("DynamoEagerGraph") == 0


def test_uint8_constants_and_bool_bytes_compile():
    """torch-mlir folds a uint8 constant (``ones_like(x, dtype=uint8)``) into
    a literal whose text the next stage's parser refuses ("inferred type(s)
    si8 are incompatible with ui8"), and has no lowering of ``view(dtype)``
    of bool as 8-bit integers (nor as bool: seed 400065): the graphs ran
    eagerly (lazy device) or raised (lm.jit; fuzzer seeds 400011, 400022,
    400038, 400049)."""
    b0, i0 = torch.tensor([True, False, True]), torch.arange(4, dtype=torch.int16)
    c = Counters()
    b, i = lazy(b0), lazy(i0)
    got = [b.view(torch.uint8).clone(), b.view(torch.int8).clone(), b.view(torch.bool).clone(),
           torch.ones_like(i, dtype=torch.uint8), torch.full_like(i, 200, dtype=torch.uint8)]
    lm.mark_step()
    want = [b0.view(torch.uint8), b0.view(torch.int8), b0, torch.ones_like(i0, dtype=torch.uint8),
            torch.full_like(i0, 200, dtype=torch.uint8)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and torch.equal(g.cpu(), w)
    jitted = lm.jit(lambda x: torch.ones_like(x, dtype=torch.uint8)).lower(i0).compile()
    assert torch.equal(jitted(i0), torch.ones_like(i0, dtype=torch.uint8))
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_uint8_operands_promoted_exactly():
    """An op promoting a uint8 operand (to float, to int16) took it as
    signed in its lowering: ``uint8 200 * 1.5`` gave -84.0, ``cat`` and
    ``where`` of uint8 and float -56.0, ``uint8 200 > 1.5`` False (silent;
    fuzzer seed 68). On the lazy device, in lm.jit and torch.compile."""
    from lazy_mlir.frontends import dynamo
    dynamo.register()
    torch._dynamo.reset()

    def fn(u, f, i):
        return [u * 1.5, torch.cat([u, f]), torch.where(u > 0, u, f), u > f, u > 1.5,
                torch.maximum(u, i), u - i, torch.stack([u, i])]
    args = (torch.tensor([200, 3, 130], dtype=torch.uint8), torch.tensor([1.5, 2.0, -1.0]),
            torch.tensor([-5, 300, 7], dtype=torch.int16))
    want = fn(*args)
    c = Counters()
    on_device = fn(*[lazy(a) for a in args])
    lm.mark_step()
    jitted = lm.jit(fn).lower(*args).compile()(*args)
    compiled = torch.compile(fn, backend="lazy_mlir")(*args)
    for got in ([t.cpu() for t in on_device], jitted, compiled):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
    assert not c.fell_back() and c.delta("EagerGraph") == 0 and c.delta("DynamoEagerGraph") == 0


def test_uint8_beside_float16_keeps_float16():
    """``where(h > 0, h, u)`` of a float16 ``h`` and a 0-d uint8 ``u`` is
    float16. The uint8 operand was converted to the computation dtype
    (float32), so the graph returned float32 data where float16 was
    recorded; the next graph given that buffer raised "input0 element type
    mismatch; expected f16 but have f32" (fuzzer seed 940125)."""
    def fn(h, u, v):
        return [torch.where(h > 0, h, u), h + v, torch.cat([h, v]), h > v, torch.maximum(h, v)]
    args = (torch.tensor([1.5, -2.0, 0.25], dtype=torch.float16), torch.tensor(3, dtype=torch.uint8),
            torch.tensor([200, 3, 130], dtype=torch.uint8))
    want = fn(*args)
    c = Counters()
    on_device = fn(*[lazy(a) for a in args])
    lm.mark_step()
    later = [t * 2 for t in on_device]  # (the next graph reads the buffers)
    lm.mark_step()
    for g, w in zip(on_device, want):
        assert g.dtype == w.dtype and torch.equal(g.cpu(), w), (g, w)
    for g, w in zip(later, want):
        assert torch.equal(g.cpu(), w * 2)
    jitted = lm.jit(fn).lower(*args).compile()(*args)
    for g, w in zip(jitted, want):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_number_beside_an_int8_tensor_does_not_kill_the_process():
    """torch-mlir converts a number to i8 without the original dtype its
    conversion needs: ``int8_x.mul_(7)`` under torch.compile (``mul.Scalar``)
    built an op on a null value, SIGSEGV, and the process died (fuzzer seed
    400079; so did int8 times bool, seed 400076, and a bool number,
    ``x.diagonal().mul_(True)``, seed 980301); ``uint8_x == 5`` and
    ``uint8_x // 7`` raised (seed 52). The number enters as a 0-d tensor of
    eager's result type, other operands are converted to the computation
    type, 8-bit quotients computed in int32. In a child process: the
    failure is its death."""
    import subprocess
    import sys
    from pathlib import Path
    code = """
import torch, lazy_mlir as lm
from lazy_mlir.frontends import dynamo
dynamo.register()
def fn(x, u):
    x.mul_(7)
    return [x + 3, x - 2.5, x == 21, u * 3, u == 5, u > 200, 300 - u, x * (x > 20), u // 7,
            x * True, u + False, x == True, u > False, x.diagonal().mul_(False)]
args = lambda: (torch.arange(6, dtype=torch.int8).reshape(3, 2), torch.tensor([5, 201], dtype=torch.uint8))
want = fn(*args())
for got in (torch.compile(fn, backend="lazy_mlir")(*args()), lm.jit(fn).lower(*args()).compile()(*args())):
    assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)), (got, want)
assert lm.metrics.counter_value("DynamoEagerGraph") == 0
"""
    env = {**__import__("os").environ, "LAZY_MLIR_COMPILE": "wait"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]



def test_a_reduction_into_an_8_bit_dtype_does_not_kill_the_process():
    """``torch.sum(int32_x, 0, out=int8_y)`` (fuzzer seed 980880), and sums
    and products of wider integers asked for int8 or uint8: torch-mlir
    converted the operand to ``i8`` without the original dtype its
    conversion needs, SIGSEGV (the lazy device's compile worker died and
    the graph ran eagerly; ``lm.jit`` died in the user's process). The
    operand is converted first, as eager does. In a child process: the
    failure is its death."""
    import subprocess
    import sys
    from pathlib import Path
    code = """
import torch, lazy_mlir as lm
def fn(x):
    return [torch.sum(x, 0, dtype=torch.int8), torch.sum(x, dtype=torch.uint8),
            torch.prod(x, 1, dtype=torch.int8), torch.prod(x.long(), dtype=torch.uint8),
            torch.sum(x.bool(), 0, dtype=torch.int8)]
x = torch.tensor([[100, -7, 3], [100, 5, -128]], dtype=torch.int32)
want = fn(x)
got = lm.jit(fn).lower(x).compile()(x)
assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)), (got, want)
y = torch.zeros(3, dtype=torch.int8).to("lazy")
torch.sum(x.to("lazy"), 0, out=y)
lazy = fn(x.to("lazy"))
lm.mark_step()
assert torch.equal(y.cpu(), want[0]) and all(torch.equal(g.cpu(), w) for g, w in zip(lazy, want))
assert lm.metrics.counter_value("EagerGraph") == 0, lm.metrics.counter_names()
"""
    env = {**__import__("os").environ, "LAZY_MLIR_COMPILE": "wait"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_bitwise_op_of_an_8_bit_and_a_bool_tensor_does_not_kill_the_process():
    """``torch.bitwise_and(uint8, bool)`` (fuzzer seed 801424: ``v2 & v1``
    of a uint8 and a 0-d bool under ``lm.jit``): torch-mlir's lowering
    failed to convert the bool to the 8-bit type and built ``arith.andi`` on
    a null value, SIGSEGV inside the pipeline ``lm.jit`` runs in the
    user's process. So did ``|``, ``^`` and the shifts, int8 too, the bool
    on either side. The bool is converted to eager's result type first
    (``uint8_promotion``). In a child process: the failure is its death."""
    import subprocess
    import sys
    from pathlib import Path
    code = """
import torch, lazy_mlir as lm
from lazy_mlir.frontends import dynamo
dynamo.register()
def fn(u, i, b, b0):
    return [torch.bitwise_and(u, b0), u | b, i ^ b, b & i, torch.bitwise_left_shift(u, b),
            torch.bitwise_right_shift(i, b), torch.bitwise_xor(b, u)]
args = lambda: (torch.tensor([3, 7, 200], dtype=torch.uint8),
                torch.tensor([-3, 5, 127], dtype=torch.int8),
                torch.tensor([True, False, True]), torch.tensor(True))
want = fn(*args())
c = lm.metrics.counter_value
on_device = fn(*[a.to("lazy") for a in args()])
lm.mark_step()
for got in (lm.jit(fn).lower(*args()).compile()(*args()),
            torch.compile(fn, backend="lazy_mlir")(*args()), [t.cpu() for t in on_device]):
    assert all(g.dtype == w.dtype and torch.equal(g, w) for g, w in zip(got, want)), (got, want)
assert c("DynamoEagerGraph") == 0 and c("EagerGraph") == 0
"""
    env = {**__import__("os").environ, "LAZY_MLIR_COMPILE": "wait"}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])

def test_all_and_any_of_uint8_compile():
    """torch-mlir has no lowering of ``all.dim`` of uint8 and builds an
    invalid ``arith.ori`` for ``any.dim``: lm.jit raised (fuzzer seed 78),
    the lazy device fell back. Eager's result is uint8 too."""
    x0 = torch.tensor([[1, 0, 2, 3], [4, 5, 6, 7]], dtype=torch.uint8)

    def fn(x):
        return [torch.all(x, 1), torch.any(x, 0), torch.all(x), torch.any(x == 9)]
    want = fn(x0)
    c = Counters()
    on_device = fn(lazy(x0))
    lm.mark_step()
    for got in ([t.cpu() for t in on_device], lm.jit(fn).lower(x0).compile()(x0)):
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_scatter_of_no_updates_compiles():
    """``abs_`` of an empty split of an empty ``diagonal`` is a scatter of
    no updates: IREE's compiler crashed on it (SIGSEGV in
    getMainTensorForLinalgExtOp) and lm.jit raised (fuzzer seed 400301)."""
    def fn(v0):
        v1 = v0.diagonal(1, 0, 1)
        v2, v3 = v1.split(2, 0)
        v2.abs_()
        return [v0, v1, v2, v3]
    x = torch.arange(16.0).reshape(4, 1, 4) - 5
    got = lm.jit(fn).lower(x.clone()).compile()(x.clone())
    assert all(torch.equal(g, w) for g, w in zip(got, fn(x.clone())))


@pytest.mark.parametrize("same", [
    lambda v: torch.maximum(v, v),
    lambda v: torch.minimum(v, v),
], ids=["maximum", "minimum"])
@pytest.mark.parametrize("write", [
    lambda v, d: v.index_add_(0, torch.tensor([1, 0], device=d), torch.ones(2, 3, device=d)),
    lambda v, d: v.scatter_(0, torch.tensor([[1, 0, 2]], device=d), torch.ones(1, 3, device=d)),
    lambda v, d: v.__setitem__(slice(1, 3), torch.ones(2, 3, device=d)),
], ids=["index_add_", "scatter_", "setitem"])
def test_scatter_into_an_argument_returned_folded(same, write):
    """``v3 = torch.maximum(v1, v1); v1.index_add_(...)``: IREE folds ``v3``
    to ``v1``'s argument (the export of an imported buffer is that buffer)
    and writes the scatter into that buffer in place (its copy elided), so
    ``v3`` came back with the additions (silent; fuzzer seed 500180).
    ``minimum`` alike, an ``insert_slice`` (``v1[1:3] = ...``) alike, and a
    reshape of ``v3`` computed in the same graph (the fuzzer's clones of
    every variable). Fixed where IREE's stream phase shows such a result
    (``in_place.folded_into_written``): it is returned through a barrier,
    and IREE copies the argument for the write. Two steps: the second call
    runs on the cached module."""
    x = torch.arange(9.0).reshape(3, 3) - 4
    c = Counters()
    for _ in range(2):
        v1 = lazy(x)
        v3 = same(v1)
        write(v1, "lazy")
        flat = v3.flatten().clone()
        lm.mark_step()
        e = x.clone()
        write(e, "cpu")
        assert torch.equal(v3.cpu(), x) and torch.equal(v1.cpu(), e)
        assert torch.equal(flat.cpu(), x.flatten())
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def _put_row(v0):  # (fuzzer seed 400055)
    v2 = v0[1]
    v2.index_put_((torch.tensor([0], device=v0.device),),
                  torch.ones((1,), dtype=torch.int64, device=v0.device))
    return [v0, v2]


def _put_last(v1):  # (400214)
    v2 = v1[-1]
    v2.index_put_((torch.tensor([0, -2, 0], device=v1.device),),
                  torch.ones((3, 3), device=v1.device))
    return [v1, v2]


def _put_chunk(v0):  # (500053)
    v1, v2 = v0.chunk(2, 2)
    v2.index_put_((torch.tensor([-4, 2, -1], device=v0.device),),
                  torch.ones((3, 3, 1), device=v0.device))
    return [v0, v1, v2]


@pytest.mark.parametrize("fn, shape, dtype", [
    (_put_row, (4, 2), torch.int64),
    (_put_last, (3, 2, 3), torch.float32),
    (_put_chunk, (5, 3, 3), torch.float32),
], ids=["row", "last", "chunk"])
def test_index_put_into_a_view_of_an_argument_compiles(fn, shape, dtype):
    """``index_put_`` into a slice of a function's argument: the copy of the
    scatter's destination (``passes/scatter_destinations``) fused into the
    scatter's dispatch failed IREE's codegen ("write affecting operations on
    global resources are restricted to workgroup distributed contexts"):
    ``lm.jit`` raised and ``torch.compile`` ran the graph eagerly (fuzzer
    seeds 400055, 400214, 500053)."""
    make = lambda: (torch.arange(torch.Size(shape).numel()) - 7).reshape(shape).to(dtype)
    got = lm.jit(fn).lower(make()).compile()(make())
    assert all(torch.equal(g, w) for g, w in zip(got, fn(make())))
    compiled_like_eager(fn, lambda: [make()])


@pytest.mark.parametrize("write", [
    lambda b: b.view(torch.uint8).copy_(b),
    lambda b: b.view(torch.uint8).fill_(1),
    lambda b: b.view(torch.int8).masked_fill_(b.view(torch.int8) == 0, True),
    lambda b: b.view(torch.uint8)[..., 1:].zero_() if b.dim() else b.view(torch.uint8).zero_(),
], ids=["copy_", "fill_", "masked_fill_", "zero_"])
def test_bool_written_through_a_byte_view(write):
    """A write of 0 or 1 through a uint8/int8 view of a bool tensor: the
    write-back ``view(uint8 -> bool)`` had no lowering (the graph ran
    eagerly), and ``x.view(torch.uint8).copy_(x)`` raised as a read of
    other elements (fuzzer seeds 500133, 400241)."""
    for b0 in (torch.tensor([True, False, True]), torch.tensor(True)):
        e = b0.clone()
        write(e)
        c = Counters()
        b = lazy(b0)
        write(b)
        lm.mark_step()
        assert torch.equal(b.cpu(), e), (b.cpu(), e)
        assert not c.fell_back() and c.delta("EagerGraph") == 0


@pytest.mark.parametrize("write", [
    lambda b: b.view(torch.uint8).mul_(5),
    lambda b: b.view(torch.uint8).add_(1),
    lambda b: b.view(torch.int8).masked_fill_(b.view(torch.int8) > 0, 3),
], ids=["mul_", "add_", "masked_fill_"])
def test_bool_written_through_a_byte_view_other_bytes_raise(write):
    """Eager keeps a byte other than 0 or 1 written into a bool tensor
    through its uint8 view (``mul_(5)`` reads back 5); the lazy device's
    bools are 0 or 1 and it gave 1 (silent): it raises at the call now,
    nothing recorded."""
    b0 = torch.tensor([True, False, True])
    b = lazy(b0)
    with pytest.raises(NotImplementedError, match="view of a bool tensor"):
        write(b)
    assert torch.equal(b.cpu(), b0)


def test_copy_from_itself_through_a_view_of_one_width():
    """``x.view(torch.float32).copy_(x)`` reads each element where it writes
    it (one width, one layout): eager converts element for element, and so
    does the graph; it raised as a read of other elements."""
    x0 = torch.tensor([1, -2, 3], dtype=torch.int32)
    e = x0.clone()
    e.view(torch.float32).copy_(e)
    x = lazy(x0)
    x.view(torch.float32).copy_(x)
    assert torch.equal(x.cpu(), e)


def test_gather_from_a_returned_slice_compiles():
    """``index_select`` from an ``unfold`` (a slice) of a transposed tensor,
    the slice returned too: IREE fused the slice into the gather's dispatch
    and its LLVM translation failed ("builtin.unrealized_conversion_cast");
    ``lm.jit`` raised, ``torch.compile`` and the lazy device ran the graph
    eagerly (fuzzer seed 400113)."""
    def fn(v1):
        v3 = v1.movedim(1, -1).unfold(-1, 1, 3)
        return [v3, v3.index_select(0, torch.tensor([1], device=v1.device))]
    make = lambda: torch.arange(36.0, dtype=torch.float64).reshape(4, 3, 3)
    got = lm.jit(fn).lower(make()).compile()(make())
    assert all(torch.equal(g, w) for g, w in zip(got, fn(make())))
    compiled_like_eager(fn, lambda: [make()])
    c = Counters()
    got = fn(lazy(make().float()))
    lm.mark_step()
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, fn(make().float())))
    assert not c.fell_back() and c.delta("EagerGraph") == 0


@pytest.mark.parametrize("fn", [torch.erf, torch.erfc, torch.erfinv, torch.lgamma,
                                torch.special.erfcx], ids=lambda f: f.__name__)
def test_float64_functions_without_a_lowering_run_alone_eagerly(fn):
    """float64 erf, erfc, erfinv, lgamma and erfcx have no lowering (IREE
    approximates erf in float32 only): every graph holding one failed to
    compile and ran eagerly whole, once per process. The op alone runs
    eagerly now, counted, eager's values; the rest of its graph compiles."""
    x = torch.tensor([-2.5, -0.3, 0.0, 0.7, 3.1, 27.0], dtype=torch.float64)
    c = Counters()
    got = fn(lazy(x) * 0.5) + 1
    lm.mark_step()
    torch.testing.assert_close(got.cpu(), fn(x * 0.5) + 1, rtol=0, atol=0, equal_nan=True)
    assert c.fell_back() == [f"aten::{fn.__name__}"] and c.delta("EagerGraph") == 0


@pytest.mark.filterwarnings("ignore:Use of masked_fill_ on expanded tensors")
@pytest.mark.parametrize("make, write", [
    (lambda: torch.tensor(True),
     lambda v: (lambda v5: v5.masked_fill_(v5 > False, False))(v.expand((2,)).T)),
    (lambda: torch.arange(3.0),
     lambda v: v.expand(2, 3).masked_fill_(
         torch.tensor([[True, False, False], [False, False, True]], device=v.device), -1.0)),
    (lambda: torch.arange(6.0),
     lambda v: (lambda u: u.masked_fill_(u > 3, torch.tensor(7.0, device=v.device)))(
         v.unfold(0, 3, 1))),
], ids=["500033", "expand", "unfold"])
def test_masked_fill_through_overlapping_views(make, write):
    """``masked_fill_`` through an ``expand`` (or overlapping ``unfold``
    windows): eager writes the value to an element where any view element
    on it is masked (deprecated, with a warning); the lazy device refused
    it (NotImplementedError; fuzzer seed 500033). Written back so now, not
    by the last view element's value: the last one on element 0 of the
    ``expand`` case is not masked, the first is."""
    e = make()
    write(e)
    c = Counters()
    x = lazy(make())
    write(x)
    lm.mark_step()
    assert torch.equal(x.cpu(), e), (x.cpu(), e)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


def test_copy_of_an_overlapping_view_onto_itself():
    """``v.copy_(v)`` of a view whose elements overlap: eager copies nothing
    (the same tensor); the lazy device ran eager's check on a stand-in
    source of its own and raised eager's "more than one element of the
    written-to tensor" error (fuzzer seed 600017)."""
    x0 = torch.arange(30, dtype=torch.uint8).reshape(5, 2, 3)
    e = x0.clone()
    e.as_strided((3, 1), (0, 2), 7).copy_(e.as_strided((3, 1), (0, 2), 7))
    x = lazy(x0)
    v = x.as_strided((3, 1), (0, 2), 7)
    v.copy_(v)
    v.copy_(x.as_strided((3, 1), (0, 2), 7))  # (another view of the same elements)
    assert torch.equal(x.cpu(), e) and torch.equal(v.cpu(), e.as_strided((3, 1), (0, 2), 7))


def test_as_strided_of_a_permuted_view_read_after_a_write():
    """``v6 = v1.movedim(1, -1).as_strided(...)`` read after a write through
    an ``unfold`` of the same view: the write left the storage's value with
    permuted strides, and the ``as_strided`` was then applied to the view's
    value instead of the storage's order: ``v6`` came back with other
    elements (silent, lazy device and ``lm.jit``; fuzzer seed 400113)."""
    def fn(v1):
        v2 = v1.movedim(1, -1)
        v3 = v2.unfold(-1, 1, 3)
        v6 = v2.as_strided((3, 3), (0, 1), 32)
        v3.clamp_(3.0, 6.0)
        return [v1, v3, v6]
    make = lambda: (torch.arange(36.0, dtype=torch.float64).reshape(4, 3, 3) - 10) / 3
    want = fn(make())
    got = lm.jit(fn).lower(make()).compile()(make())
    assert all(torch.equal(g, w) for g, w in zip(got, want))
    got = fn(lazy(make()))
    lm.mark_step()
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))


@pytest.mark.parametrize("shifts,dims", [(2, ()), (-7, ()), (13, ()), (7, 1), (-6, 1),
                                         (12, -1), ((3, -9), (0, 1)), ((1, 5), (0, 1))])
def test_roll_compiles_and_wraps_any_shift(shifts, dims):
    """``x.roll(k)`` rolls the flattened tensor: torch-mlir's pattern takes
    dims only ("failed to legalize operation 'torch.constant.int'"), so the
    graph ran eagerly on the lazy device and lm.jit raised. A shift of a
    dim's size or more gave wrong values, silently (the slices clamp)."""
    x = torch.arange(10.0).reshape(2, 5)
    c = Counters()
    assert torch.equal(lazy(x).roll(shifts, dims).cpu(), x.roll(shifts, dims))
    assert c.delta("EagerGraph") == 0 and c.delta("aten::roll") == 0
    fn = lm.jit(lambda a: a.roll(shifts, dims)).lower(x).compile()
    assert torch.equal(torch.as_tensor(fn(x)), x.roll(shifts, dims))


def test_roll_of_a_roll_of_a_strided_view_compiles():
    """torch-mlir's roll casts its slices to dynamic sizes; IREE's concat of
    a roll of a roll did not compile ("expected dimension 0 of collapsed
    type to be static", fuzzer seed 900129: the graph ran eagerly)."""
    x0 = torch.arange(24).reshape(6, 4)
    c = Counters()
    x = lazy(x0)[::2]
    got = [x.roll(-1, 0), x.roll(-1, 0).roll(5, 0)]
    lm.mark_step()
    assert torch.equal(got[1].cpu(), x0[::2].roll(-1, 0).roll(5, 0))
    assert c.delta("EagerGraph") == 0 and not c.fell_back()


@pytest.mark.parametrize("write", [lambda v: v.neg_(), lambda v: v.fill_(3.0),
                                   lambda v: v.copy_(torch.ones_like(v))])
def test_a_write_through_a_view_of_no_elements_changes_nothing(write):
    """An in-place op on an empty view (``diagonal`` past the matrix) was
    recorded as a scatter of nothing written back into the base: lm.jit
    refused the module (InPlaceHazard: the argument updated in place while
    a result still reads it; fuzzer seed 900094)."""
    def fn(a):
        first, second = a.chunk(2, -1)
        empty = first.diagonal(2, 1, 0)
        write(empty)
        return a, first, second, empty
    x = torch.tensor([[1.5, 2.5]])
    want = fn(x.clone())
    got = lm.jit(fn).lower(x).compile()(x.clone())
    assert all(torch.equal(torch.as_tensor(g), w) for g, w in zip(got, want))
    c = Counters()
    got = fn(lazy(x))
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
    assert c.delta("EagerGraph") == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_a_view_of_the_base_read_after_a_scatter_through_its_permute(dtype):
    """A write back through ``x.permute(1, 0)`` leaves the storage's value
    with the permute's strides; ``x.view(4, 3)`` read that value, and shape
    inference raised "view size is not compatible" where eager reshapes its
    contiguous memory (fuzzer seed 900475)."""
    def program(dev):
        v0 = (torch.arange(12).reshape(3, 4) % 3).to(dtype).to(dev)
        v1 = v0.permute(1, 0)
        v2 = v0.view_as(v1)
        v1.index_add_(0, torch.tensor([2], device=dev), torch.ones((1, 3), dtype=dtype, device=dev))
        v3 = v0.view(-1)
        return [v0, v1, v2, v3]

    want = program("cpu")
    c = Counters()
    got = program("lazy")
    lm.mark_step()
    for g, w in zip(got, want):
        assert torch.equal(g.cpu(), w)
    assert not c.fell_back() and c.delta("EagerGraph") == 0


@pytest.mark.parametrize("fn", [
    lambda a: a.view(torch.bool).logical_not(),
    lambda a: a.permute(1, 0).unbind(-1)[1].view(torch.bool),
    lambda a: (a > 0).reshape(-1)[:4].view(torch.int32) + 1,
    lambda a: a.view(torch.bool).view(torch.uint8),
    lambda a: a.view(torch.bool).view(torch.float32) * 2,
], ids=["float_as_bool", "unbound_column_as_bool", "bool_as_int32", "bool_view_back_to_bytes",
        "bool_view_back_to_float"])
def test_a_view_between_bool_and_a_wider_dtype_compiles_every_way(fn):
    """``view(torch.bool)`` of a float (and bool as int32) had no lowering:
    lm.jit raised ("failed to legalize operation 'torch.constant.int'") and
    torch.compile ran the graph eagerly (fuzzer seeds 900278, 900357). The
    bytes as uint8 now (a bitcast), read as bools; a chain of views reads
    the first tensor's bytes (``passes/dtype_views.py``), so a
    float viewed as bool and back keeps its bytes."""
    x = torch.tensor([[1.0, 0.0, -2.0], [-0.0, 2.5, 3.0]])
    want = fn(x)
    got = torch.as_tensor(lm.jit(fn).lower(x).compile()(x))
    assert torch.equal(got, want)
    c = Counters()
    assert torch.equal(torch.compile(fn, backend="lazy_mlir")(x), want)
    assert c.delta("DynamoEagerGraph") == 0
    assert torch.equal(fn(lazy(x)).cpu(), want)


def test_a_view_keeps_eagers_stride_of_a_size_one_dim():
    """A spec whose only difference from contiguous was a size-1 dim's
    stride became a contiguous meta tensor in shape inference, so a view of
    it took other strides than eager's (``[3, 1]`` of strides ``(1, 3)``
    viewed as itself: ``(1, 1)``), and ``clamp(v, out=w)`` of two such views
    of one tensor raised eager's partial-overlap error where eager computes
    (fuzzer seed 902283; the lazy device and lm.jit)."""
    def fn(a):
        w = a.transpose(0, 1)
        v = w.view_as(w)
        torch.clamp(v, 0, 3, out=w)
        return a, w, v
    x = torch.tensor([[1.0, 5.0, -2.0]])
    want = fn(x.clone())
    got = fn(lazy(x))
    for g, e in zip(got, want):
        assert g.stride() == e.stride() and torch.equal(g.cpu(), e)
    jitted = lm.jit(fn).lower(x.clone()).compile()(x.clone())
    assert all(torch.equal(torch.as_tensor(g), e) for g, e in zip(jitted, want))


@pytest.mark.parametrize("op", ["addcmul", "addcdiv"])
@pytest.mark.parametrize("value", [0.5, 1, -3.25])
def test_float16_addcmul_rounds_once_as_eager(op, value):
    """Eager's float16 kernels compute ``self + value * t1 * t2`` in float32
    and round once; torch-mlir's decomposition rounded after each op, an
    ulp off (fuzzer seed 960188: ``v.addcmul_(v, v, value=0.5)``). A lifted
    value (0.5) and a constant one (1) both."""
    g = torch.Generator().manual_seed(3)
    make = lambda: ((torch.randint(-40, 41, (64,), generator=g) / 8) ** 2).half()
    x, t1, t2 = make(), make(), make() + 1

    def fn(x, t1, t2):
        return getattr(torch, op)(x, t1, t2, value=value)
    want = fn(x, t1, t2)
    c = Counters()
    got = fn(lazy(x), lazy(t1), lazy(t2))
    lm.mark_step()
    assert torch.equal(got.cpu(), want)
    assert c.delta("EagerGraph") == 0 and not c.fell_back()
    assert torch.equal(torch.as_tensor(lm.jit(fn).lower(x, t1, t2).compile()(x, t1, t2)), want)


@pytest.mark.parametrize("case", ["broadcast_self", "0d_tensors_f64_self", "int"])
def test_addcmul_whose_self_broadcasts_the_product_compiles(case):
    """Fuzzer seeds 960527 and 960626: ``x.unsqueeze(-2).addcmul_(t, t)``
    and a float64 ``m.addcmul_(s, s)`` of a 0-d float32 ``s``. torch-mlir's
    decomposition typed ``t1 * t2`` with the result's shape, its linalg
    pipeline failed ("'tensor.cast' op ... cast incompatible"): the lazy
    device ran the graph eagerly and ``lm.jit`` raised. PyTorch's reference
    decomposition computes eager's values (``ops/half_opmath``)."""
    g = torch.Generator().manual_seed(5)
    self, t = {"broadcast_self": ((2, 1, 5), (5,)), "0d_tensors_f64_self": ((2, 2), ()),
               "int": ((3, 4), (4,))}[case]
    make = lambda shape, dtype: (torch.randint(-20, 21, shape, generator=g) / 4).to(dtype)
    dtype = torch.int32 if case == "int" else torch.float32
    args = (make(self, torch.float64 if case.startswith("0d") else dtype), make(t, dtype),
            make(t, dtype))

    def fn(x, t1, t2):
        return torch.addcmul(x, t1, t2, value=3 if case == "int" else 0.5)
    want = fn(*args)
    c = Counters()
    got = fn(*[lazy(a) for a in args])
    lm.mark_step()
    assert torch.equal(got.cpu(), want) and c.delta("EagerGraph") == 0 and not c.fell_back()
    assert torch.equal(torch.as_tensor(lm.jit(fn).lower(*args).compile()(*args)), want)


@pytest.mark.parametrize("byte", [torch.uint8, torch.int8])
def test_a_returned_comparison_and_its_bytes_compile(byte):
    """Fuzzer seed 960657: an argument written in place, a comparison of it
    and the comparison's byte view, all returned. IREE 3.13 fused the three
    results into one dispatch and its codegen failed ("write affecting
    operations on global resources ..."): ``lm.jit`` raised, torch.compile
    ran the graph eagerly. The conversion now has a dispatch of its own
    (``passes/returned_bool_bytes``)."""
    def fn(v):
        v.mul_(2)
        mask = torch.ge(v, 2.0)
        return [v, mask, mask.view(byte)]
    x = torch.tensor([1.5, -2.0, 0.75])
    want = fn(x.clone())
    got = lm.jit(fn).lower(x.clone()).compile()(x.clone())
    assert all(torch.equal(torch.as_tensor(g), w) for g, w in zip(got, want))
    compiled_like_eager(fn, lambda: (x.clone(),))


def _unfold_strided(dev, accumulate):
    v0 = torch.arange(32).reshape(4, 2, 4).to(dev)[::2]
    v1 = v0.unfold(2, 3, 3)
    v1.index_put_((torch.tensor([-1, -1], device=dev),),
                  torch.full((2, 2, 1, 3), 5, dtype=torch.int64, device=dev),
                  accumulate=accumulate)
    return [v0, v1]


def _unfold_unit(dev, accumulate):
    v0 = torch.tensor([[7]]).to(dev)
    v1 = v0.unfold(0, 1, 2)
    v1.index_put_((torch.tensor([-1, 0], device=dev),),
                  torch.ones((2, 1, 1), dtype=torch.int64, device=dev), accumulate=accumulate)
    return [v0, v1]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("program", [_unfold_strided, _unfold_unit], ids=["strided", "unit"])
def test_index_put_into_an_unfold_compiles(program, accumulate):
    """Fuzzer seeds 980748 and 970273: ``index_put_`` (duplicate indices)
    into an ``unfold`` of a strided view, or of a ``[1, 1]`` tensor. The
    unfold's gather (a map ``d3 + d2 * 3``, or a transpose of unit dims)
    fused into the scatter's dispatch failed IREE 3.13's codegen ("write
    affecting operations on global resources are restricted to workgroup
    distributed contexts"): the graph ran eagerly. It is kept out of the
    dispatch now (``passes/scatter_destinations``)."""
    def fn(dev):
        return program(dev, accumulate)

    want = fn("cpu")
    c = Counters()
    got = fn("lazy")
    lm.mark_step()
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
    assert not c.fell_back() and c.delta("EagerGraph") == 0
