"""Counted loops (``ops/loops.py``'s ``fori``): a Python loop when run, one
``while_loop`` when traced for import, made an ``scf.for`` of ``n`` trips by
``dialects.torch_import.counted_loops``, and IREE computes what eager does."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects.torch_import import import_fx
from lazy_mlir.ops.loops import (NEST_STEPS, as_traced_loops, at, block_size, fori, put, scan,
                                 take)
from lazy_mlir.pipeline.in_place import clobbered_args, main_arity
from lazy_mlir.pipeline.stages import Provenance, Stage, lower_torch

STEPS = 5


def recurrence(x, h, w):
    """``h = tanh(x[t] + h @ w)`` for t = T-1 .. 0 (backwards in time, as a
    reversed RNN direction), each step's ``h`` kept."""
    def step(i, h, hs, x, w):
        t = at(i, STEPS, ascending=False)
        h = torch.tanh(take(x, t) + h @ w)
        return h, put(hs, t, h), x, w
    h, hs = fori(STEPS, step, (h, h.new_zeros(x.shape), x, w))[:2]
    return h, hs


def unrolled(x, h, w):
    hs = [None] * STEPS
    for t in range(STEPS - 1, -1, -1):
        h = hs[t] = torch.tanh(x[t] + h @ w)
    return h, torch.stack(hs)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(STEPS, 2, 3, generator=g), torch.randn(2, 3, generator=g),
            torch.randn(3, 3, generator=g) * 0.5)


def _traced(fn):
    return make_fx(as_traced_loops(fn), tracing_mode="fake")(*_inputs())


def test_run_is_a_python_loop_over_the_body():
    for got, want in zip(recurrence(*_inputs()), unrolled(*_inputs())):
        torch.testing.assert_close(got, want)


def test_traced_is_one_while_loop():
    gm = _traced(recurrence)
    loops = [n for n in gm.graph.nodes if n.target is torch.ops.higher_order.while_loop]
    assert len(loops) == 1
    assert sum(isinstance(m, torch.fx.GraphModule) for m in gm.children()) == 2  # cond, body


def test_imported_loop_is_counted_and_lowers_to_scf_for():
    torch_text = str(import_fx(_traced(recurrence)))
    assert "torch.prim.Loop" in torch_text and "9223372036854775807" not in torch_text
    assert "while_loop_cond" not in torch_text  # the condition function is gone
    linalg = lower_torch(Stage("torch", torch_text, Provenance("test", 0.0)), PipelineConfig())[-1].text
    assert f"scf.for %arg3 = %c0 to %c{STEPS} step %c1" in linalg, linalg
    assert main_arity(linalg) == 3 and clobbered_args(linalg) == ()
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    module = rt.load_vm_flatbuffer(ic.compile_str(linalg, extra_args=flags), driver="local-sync")
    got = module.main(*[a.numpy() for a in _inputs()])
    for g, want in zip(got, unrolled(*_inputs())):
        np.testing.assert_allclose(g.to_host(), want.numpy(), rtol=1e-5, atol=1e-6)


def test_a_loop_that_is_not_counted_is_refused():
    """torch-mlir 20261001 would lower it without its condition (2**63 - 1 trips)."""
    from torch._higher_order_ops.while_loop import while_loop_op

    def halve(x):
        return while_loop_op(lambda x, k: x.sum() > 1, lambda x, k: (x * 0.5, k + 1),
                             (x, torch.zeros((), dtype=torch.int64)), ())
    gm = make_fx(halve, tracing_mode="fake")(torch.ones(4))
    with pytest.raises(NotImplementedError, match="not `i < n`"):
        import_fx(gm)


def test_vulkan_int64_check_knows_the_counter_stays_small():
    """The vulkan target holds int64 as int32: a counted loop's counter ends
    at ``n``; an int64 carry of another loop is unbounded."""
    from torch._higher_order_ops.while_loop import while_loop_op

    from lazy_mlir.passes.int64_range import int64_overflow_reason
    assert int64_overflow_reason(_traced(recurrence)) is None
    nested = make_fx(as_traced_loops(lambda x, h, w: scanned(x, h, w, 6, 3, True)),
                     tracing_mode="fake")(*_scan_inputs(6))  # blocks: their indices too
    assert int64_overflow_reason(nested) is None

    def halve(x):
        return while_loop_op(lambda x, k: x.sum() > 1, lambda x, k: (x * 0.5, k + 1),
                             (x, torch.zeros((), dtype=torch.int64)), ())
    assert "while_loop" in int64_overflow_reason(make_fx(halve, tracing_mode="fake")(torch.ones(4)))


@pytest.mark.parametrize("start, stride", [(1, 1), (0, 2)])
def test_a_counter_that_does_not_start_at_0_and_step_by_1_is_refused(start, stride):
    """``i < 4`` alone does not make 4 trips: the counter must start at 0 and
    grow by 1, or the loop would be given the wrong trip count."""
    from torch._higher_order_ops.while_loop import while_loop_op

    def loop(x):
        counter = torch.zeros((), dtype=torch.int64) + start
        return while_loop_op(lambda i, x: i < 4, lambda i, x: (i + stride, x * 0.5),
                             (counter, x), ())
    gm = make_fx(loop, tracing_mode="fake")(torch.ones(4))
    with pytest.raises(NotImplementedError, match="start at 0 and grow by 1"):
        import_fx(gm)


# ------------------------------------------------------------------ scan
def scanned(x, h, w, steps, block, reverse):
    """``recurrence`` through ``scan``: each step's ``h`` and ``2 h`` kept."""
    def step(carries, rows, consts):
        (h,), (x,), (w,) = carries, rows, consts
        h = torch.tanh(x + h @ w)
        return (h,), (h, 2 * h)
    (h,), (hs, doubled) = scan(step, steps, (h,), (x,), (w,), (h.shape, h.shape), reverse,
                               block=block)
    return h, hs, doubled


def scanned_eagerly(x, h, w, steps, reverse):
    hs = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        h = hs[t] = torch.tanh(x[t] + h @ w)
    return h, torch.stack(hs), 2 * torch.stack(hs)


def _scan_inputs(steps):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(steps, 2, 3, generator=g), torch.randn(2, 3, generator=g),
            torch.randn(3, 3, generator=g) * 0.5)


# (steps, block): one loop, blocks that divide the steps, blocks and a tail
SCANS = [(5, None), (6, 3), (7, 3)]


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("steps,block", SCANS)
def test_scan_in_blocks_runs_and_compiles_like_eager(steps, block, reverse):
    """``scan`` as Python loops, and traced (a loop, or an outer loop over
    blocks around an inner one, plus a tail block's loop) through IREE, gives
    what eager does."""
    inputs = _scan_inputs(steps)
    want = scanned_eagerly(*inputs, steps, reverse)

    def fn(x, h, w):
        return scanned(x, h, w, steps, block, reverse)
    for got, w in zip(fn(*inputs), want):
        torch.testing.assert_close(got, w)
    gm = make_fx(as_traced_loops(fn), tracing_mode="fake")(*inputs)
    torch_text = str(import_fx(gm))
    loops = 1 if block is None else 2 + (steps % block > 0)
    assert torch_text.count("torch.prim.Loop ") == loops
    linalg = lower_torch(Stage("torch", torch_text, Provenance("test", 0.0)),
                         PipelineConfig())[-1].text
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    module = rt.load_vm_flatbuffer(ic.compile_str(linalg, extra_args=flags), driver="local-sync")
    for g, w in zip(module.main(*[a.numpy() for a in inputs]), want):
        np.testing.assert_allclose(g.to_host(), w.numpy(), rtol=1e-5, atol=1e-6)


def test_unrolled_scan_is_a_python_loop_with_lists():
    inputs = _scan_inputs(4)

    def step(carries, rows, consts):
        h = torch.tanh(rows[0] + carries[0] @ consts[0])
        return (h,), (h,)
    (h,), (hs,) = scan(step, 4, inputs[1:2], inputs[:1], inputs[2:], ((2, 3),), unroll=True)
    want = scanned_eagerly(*inputs, 4, False)
    assert isinstance(hs, list) and len(hs) == 4
    torch.testing.assert_close(torch.stack(hs), want[1])
    gm = make_fx(as_traced_loops(lambda x, h, w: scan(step, 4, (h,), (x,), (w,), ((2, 3),),
                                                      unroll=True)[1][0]),
                 tracing_mode="fake")(*inputs)
    assert not any(n.target is torch.ops.higher_order.while_loop for n in gm.graph.nodes)


def test_block_size_is_near_the_square_root():
    assert block_size(NEST_STEPS - 1) is None
    assert block_size(128) == 16 and block_size(64) == 8 and block_size(32) == 8
    assert block_size(127) == 11  # prime: no divisor, a tail block
