"""In-place ops and views on lazy tensors alias exactly as in eager PyTorch.

Each test runs the same program on a CPU tensor and on its lazy copy, and
compares every tensor of the program (bases and views) afterwards.
"""
from __future__ import annotations

import copy

import pytest
import torch

import lazy_mlir as lm
from e2e_helpers import LAZY, assert_lazy_close, lazy


def _x(*shape):
    return torch.arange(float(torch.Size(shape).numel())).reshape(shape)


def run_both(program, *inputs, mark_step=False):
    """Run ``program`` on CPU inputs and lazy copies; compare every output."""
    eager = program(*[t.clone() for t in inputs])
    lazies = program(*[lazy(t) for t in inputs])
    if mark_step:
        lm.mark_step()
    assert len(eager) == len(lazies)
    for i, (e, l) in enumerate(zip(eager, lazies)):
        assert l.device == LAZY, i
        assert l.shape == e.shape, (i, l.shape, e.shape)
        assert l.stride() == e.stride(), (i, l.stride(), e.stride())
        torch.testing.assert_close(l.cpu(), e, msg=lambda m: f"output {i}: {m}")


# ------------------------------------------------------------ in-place basics
@pytest.mark.parametrize("mark_step", [False, True])
def test_add_(mark_step):
    def program(x):
        r = x.add_(1)
        assert r is x
        x.mul_(2.5)
        x.sub_(x * 0.5, alpha=0.5)
        return (x,)
    run_both(program, _x(2, 3), mark_step=mark_step)


def test_inplace_on_select_view():
    def program(x):
        col = x[:, 0]
        col.mul_(2)
        return x, col
    run_both(program, _x(3, 4))


def test_inplace_on_flat_view():
    def program(x):
        flat = x.view(-1)
        flat.add_(1)
        return x, flat
    run_both(program, _x(2, 3))


def test_inplace_on_flat_view_then_slice():
    def program(x):
        flat = x.view(-1)
        flat[1:4].mul_(-1)
        return x, flat
    run_both(program, _x(2, 3))


def test_t_():
    def program(x):
        r = x.t_()
        assert r is x
        assert x.shape == (4, 2)
        return (x, x + 0)
    run_both(program, _x(2, 4))


def test_t_then_inplace_and_old_view():
    def program(x):
        row = x[0]
        x.t_()
        x[1].add_(100)  # column 1 of the original
        return x, row
    run_both(program, _x(2, 3))


def test_transpose_():
    def program(x):
        x.transpose_(0, 2)
        x.mul_(3)
        return (x,)
    run_both(program, _x(2, 3, 4))


def test_copy_from_cpu_into_slice():
    src = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -5.0, -6.0]])

    def program(x):
        x[2:].copy_(src)
        return (x,)
    run_both(program, _x(4, 3))


def test_copy_broadcast_and_dtype():
    def program(x, y):
        x[1].copy_(y)           # float -> broadcast row
        x[:, 2].copy_(torch.tensor([7, 8, 9]))  # int64 from CPU -> float32
        return (x,)
    run_both(program, _x(3, 3), torch.tensor([0.5, 1.5, 2.5]))


def test_copy_lazy_into_view():
    def program(x, y):
        x[:, 1:3].copy_(y.t())
        return x, y
    run_both(program, _x(3, 4), _x(2, 3) * -1)


def test_setitem():
    def program(x):
        x[0] = 5.0
        x[1, 1:] = torch.tensor([-1.0, -2.0])
        x[:, 0] += 10
        return (x,)
    run_both(program, _x(3, 3))


def test_zero_():
    def program(x):
        x[1].zero_()
        y = x.clone()
        y.zero_()
        return x, y
    run_both(program, _x(3, 2))


def test_fill_():
    def program(x):
        x.fill_(3.25)
        x[:, 1].fill_(-1)
        x[0, 0].fill_(torch.tensor(9.0))
        return (x,)
    run_both(program, _x(2, 3))


def test_int_inplace_keeps_dtype():
    def program(x):
        x.add_(2)
        x.mul_(3)
        x[0].sub_(1)
        return (x,)
    run_both(program, torch.arange(6).reshape(2, 3))


def test_inplace_float_into_int_errors_like_eager():
    x = torch.arange(3)
    with pytest.raises(RuntimeError):
        x.add_(0.5)
    lx = lazy(torch.arange(3))
    with pytest.raises(RuntimeError):
        lx.add_(0.5)


# ------------------------------------------------------------- aliasing
@pytest.mark.parametrize("mark_step", [False, True])
def test_base_sees_view_writes(mark_step):
    x0 = _x(3, 4)
    lx = lazy(x0)
    v = lx[1]
    if mark_step:
        lm.mark_step()
    v.add_(10)
    if mark_step:
        lm.mark_step()
    e = x0.clone()
    e[1].add_(10)
    assert_lazy_close(lx, e)
    assert_lazy_close(v, e[1])


@pytest.mark.parametrize("mark_step", [False, True])
def test_view_sees_base_writes(mark_step):
    x0 = _x(3, 4)
    lx = lazy(x0)
    v = lx[:, 1:3]
    w = lx.view(2, 6)
    before = v.cpu()  # read once before the write: no stale view
    torch.testing.assert_close(before, x0[:, 1:3])
    if mark_step:
        lm.mark_step()
    lx.mul_(-1)
    if mark_step:
        lm.mark_step()
    neg = -x0
    assert_lazy_close(v, neg[:, 1:3])
    assert_lazy_close(w, neg.view(2, 6))
    lx.zero_()
    assert_lazy_close(v, torch.zeros(3, 4)[:, 1:3])


def test_sibling_views_see_each_other():
    x0 = _x(4, 4)
    lx = lazy(x0)
    row = lx[2]
    col = lx[:, 1]
    row.fill_(-5)
    lm.mark_step()
    col.add_(1)
    e = x0.clone()
    e[2].fill_(-5)
    e[:, 1].add_(1)
    assert_lazy_close(row, e[2])
    assert_lazy_close(col, e[:, 1])
    assert_lazy_close(lx, e)


def test_chained_views():
    def program(x):
        a = x[1:]
        b = a[:, 2]
        b.add_(1)
        x[1:][:, 2].add_(1)
        x.t()[0].mul_(-1)
        x[1:3].view(-1)[1:3].add_(1000)
        x[::2][1].add_(-1000)
        return x, a, b
    run_both(program, _x(4, 5))


def test_chained_views_after_mark_step():
    def program(x):
        a = x[1:]
        lm_step = getattr(x, "device", None) == LAZY
        if lm_step:
            lm.mark_step()
        a[:, 2].add_(1)
        if lm_step:
            lm.mark_step()
        a.unsqueeze(0)[0, 0].mul_(3)
        return x, a
    run_both(program, _x(3, 4))


def test_unbind_views_written():
    def program(x):
        a, b, c = x.unbind(0)
        b.add_(5)
        c.mul_(-1)
        p, q = x.unbind(1)
        p.zero_()
        return x, a, b, c, p, q
    run_both(program, _x(3, 2))


def test_split_views_written():
    def program(x):
        parts = x.split(2)        # sizes 2, 2, 1
        parts[1].mul_(3)
        parts[2].fill_(-1)
        halves = x.split([1, 3], dim=1)
        halves[1][0].add_(100)
        chunks = x.chunk(2, dim=1)
        chunks[0].sub_(0.5)
        return (x, *parts, *halves, *chunks)
    run_both(program, _x(5, 4))


def test_write_through_permute_and_diagonal():
    def program(x):
        x.permute(2, 0, 1)[1].add_(7)
        d = x[0].diagonal()
        d.fill_(-3)
        return x, d
    run_both(program, _x(3, 3, 2))


def test_write_through_squeeze_unsqueeze_reshape():
    def program(x):
        x.unsqueeze(0)[0, 1].add_(1)
        x.reshape(3, 2)[2].mul_(10)
        x[None].squeeze(0)[0, 0].fill_(42)
        return (x,)
    run_both(program, _x(2, 3))


def test_clone_does_not_alias():
    x0 = _x(2, 2)
    lx = lazy(x0)
    c = lx.clone()
    c.add_(1)
    d = lx.detach()
    assert_lazy_close(lx, x0)
    assert_lazy_close(c, x0 + 1)
    d.mul_(2)  # detach aliases
    assert_lazy_close(lx, x0 * 2)


def test_out_variant():
    a, b = _x(2, 3), _x(2, 3) + 1
    out = torch.empty(2, 3, device="lazy")
    r = torch.add(lazy(a), lazy(b), out=out)
    assert r is out
    assert_lazy_close(out, a + b)
    big = torch.empty(3, 2, device="lazy")
    view = big.t()
    torch.mul(lazy(a), 2, out=view)
    assert_lazy_close(big, (a * 2).t().contiguous())


# ----------------------------------------------------------------- optimizer
def test_sgd_step_manual_grads():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    lmodel = copy.deepcopy(model).to("lazy")
    grads = [torch.randn_like(p) for p in model.parameters()]
    for p, lp, g in zip(model.parameters(), lmodel.parameters(), grads):
        p.grad = g.clone()
        lp.grad = lazy(g)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lopt = torch.optim.SGD(lmodel.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.step()
        lopt.step()
        lm.mark_step()
    for p, lp in zip(model.parameters(), lmodel.parameters()):
        assert lp.device == LAZY
        assert_lazy_close(lp.detach(), p.detach())


def test_sgd_training_loop():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    lmodel = copy.deepcopy(model).to("lazy")
    x = torch.randn(5, 4)
    y = torch.randn(5, 3)
    lx, ly = lazy(x), lazy(y)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    lopt = torch.optim.SGD(lmodel.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        lopt.zero_grad()
        lloss = torch.nn.functional.mse_loss(lmodel(lx), ly)
        lloss.backward()
        lopt.step()
        lm.mark_step()
        torch.testing.assert_close(lloss.detach().cpu(), loss.detach(), rtol=1e-5, atol=1e-5)
    for p, lp in zip(model.parameters(), lmodel.parameters()):
        assert_lazy_close(lp.grad, p.grad, rtol=1e-5, atol=1e-5)
        assert_lazy_close(lp.detach(), p.detach(), rtol=1e-5, atol=1e-5)


def test_alias_of_an_argument_survives_an_in_place_write_in_the_same_graph():
    # `a * 1` folds to the argument, which IREE also updates in place for `a`:
    # the result that is the argument unchanged must be the argument itself.
    a = torch.arange(6.0).to("lazy")
    b = a * 1
    a[2:].copy_(torch.full((4,), -1.0))
    lm.mark_step()
    assert b.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert a.cpu().tolist() == [0.0, 1.0, -1.0, -1.0, -1.0, -1.0]


def test_view_of_an_argument_survives_an_in_place_write_in_the_same_graph():
    # IREE writes `a[2:]` in place into the argument a view of which is also
    # returned (an explicit copy before IREE is elided too): the graph runs eagerly.
    a = torch.arange(6.0).to("lazy")
    b = a.view(2, 3) * 1
    a[2:].copy_(torch.full((4,), -1.0))
    lm.mark_step()
    assert b.cpu().flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert a.cpu().tolist() == [0.0, 1.0, -1.0, -1.0, -1.0, -1.0]
