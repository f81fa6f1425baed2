"""passes/grad_barrier.py: a returned matmul result (a weight gradient) that
an optimizer update also reads sits behind ``util.optimization_barrier`` on
cpu, and IREE then makes the update one dispatch instead of three."""
from __future__ import annotations

import re

import torch

import lazy_mlir as lm
from lazy_mlir.targets import get_target


def _adamw_like(dw, p, m, v):
    m2 = m + (dw - m) * 0.1
    v2 = v * 0.999 + dw * dw * 0.001
    return p * 0.99 + m2 / (v2.sqrt() + 1e-8) * 0.01, m2, v2


def weight_grad_and_update(a, b, p, m, v):
    """A conv weight's gradient (a matmul, reshaped) returned as ``p.grad``
    and read by the update, as in a training step's graph."""
    dw = (a.t() @ b).reshape(p.shape)
    return (dw, *_adamw_like(dw, p, m, v))


def _inputs():
    torch.manual_seed(0)
    a, b = torch.randn(32, 64), torch.randn(32, 64 * 9)
    p, m, v = torch.randn(64, 64, 3, 3), torch.randn(64, 64, 3, 3), torch.rand(64, 64, 3, 3)
    return a, b, p, m, v


def _dispatches(linalg: str) -> list[str]:
    import iree.compiler as ic
    flags = [f for f in get_target("cpu").flags] + ["--compile-to=flow"]
    flow = ic.compile_str(linalg, target_backends=["llvm-cpu"], extra_args=flags).decode()
    return re.findall(r"flow\.executable\.export public @(\w+)", flow)


def test_a_returned_weight_gradient_and_its_update_are_two_dispatches():
    text = lm.jit(weight_grad_and_update).lower(*_inputs()).as_text("linalg", "cpu")
    assert text.count('"util.optimization_barrier"') == 1
    names = _dispatches(text)
    # the matmul, and m, v and p in one elementwise dispatch (without the
    # barrier: 3 elementwise dispatches, m and v computed twice)
    assert len(names) == 2, names
    assert sum("elementwise" in n for n in names) == 1, names


def test_a_matmul_result_not_returned_gets_no_barrier():
    def forward(a, b, p, m, v):
        return _adamw_like((a.t() @ b).reshape(p.shape), p, m, v)
    assert '"util.optimization_barrier"' not in lm.jit(forward).lower(*_inputs()).as_text(
        "linalg", "cpu")


def test_the_step_with_the_barrier_matches_eager():
    args = _inputs()
    got = lm.jit(weight_grad_and_update).lower(*args, target="cpu").compile()(*args)
    for g, w in zip(got, weight_grad_and_update(*args)):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5)
