"""Ops on lazy tensors give what eager PyTorch gives on the CPU."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import LAZY, assert_lazy_close, lazy


def _inputs(*shapes, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in shapes]


# ---------------------------------------------------------------- elementwise
ELEMENTWISE = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2.5),
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / (b.abs() + 1),
    "exp": lambda a, b: torch.exp(a),
    "tanh": lambda a, b: torch.tanh(a),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "relu": lambda a, b: torch.relu(a),
    "where": lambda a, b: torch.where(a > b, a, b),
    "clamp": lambda a, b: torch.clamp(a, min=-0.5, max=0.5),
    "clamp_min": lambda a, b: a.clamp(min=0.25),
    "scalar_chain": lambda a, b: (a * 3.0 - 1.5) / 2.0 + b,
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise(name):
    fn = ELEMENTWISE[name]
    a, b = _inputs((3, 4), (3, 4))
    assert_lazy_close(fn(lazy(a), lazy(b)), fn(a, b))


def test_elementwise_many_in_one_step():
    a, b = _inputs((2, 5), (2, 5), seed=1)
    la, lb = lazy(a), lazy(b)
    outs = {k: fn(la, lb) for k, fn in ELEMENTWISE.items()}
    lm.mark_step()
    for k, fn in ELEMENTWISE.items():
        assert_lazy_close(outs[k], fn(a, b))


@pytest.mark.parametrize("shape_a,shape_b", [
    ((3, 1), (1, 4)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 1, 4)),
    ((1,), (3, 2)),
    ((), (2, 3)),
])
def test_broadcasting(shape_a, shape_b):
    a, b = _inputs(shape_a, shape_b, seed=2)
    expected = a * b + a
    assert_lazy_close(lazy(a) * lazy(b) + lazy(a), expected)


# -------------------------------------------------------------- type promotion
def test_int_plus_float_tensor():
    i = torch.tensor([[1, 2, 3], [4, 5, 6]])
    f = torch.tensor([[0.5, 1.5, 2.5], [3.5, 4.5, 5.5]])
    assert_lazy_close(lazy(i) + lazy(f), i + f)
    assert_lazy_close(lazy(f) * lazy(i), f * i)


def test_int_plus_float_scalar():
    i = torch.tensor([1, 2, 3])
    out = lazy(i) + 2.5
    assert out.dtype == torch.float32
    assert_lazy_close(out, i + 2.5)
    assert_lazy_close(lazy(i) * 3, i * 3)  # stays int64
    i32 = i.to(torch.int32)
    assert_lazy_close(lazy(i32) + 7, i32 + 7)  # stays int32
    assert_lazy_close(lazy(i) / 2, i / 2)  # true division gives float
    assert_lazy_close(lazy(i) // 2, i // 2)


def test_int_true_division_of_tensors():
    a = torch.tensor([7, -7, 9])
    b = torch.tensor([2, 2, 4])
    assert_lazy_close(lazy(a) / lazy(b), a / b)


def test_bool_masks():
    x, y = _inputs((3, 4), (3, 4), seed=3)
    mask = x > 0
    lx, ly = lazy(x), lazy(y)
    lmask = lx > 0
    assert lmask.dtype == torch.bool
    assert_lazy_close(lmask, mask)
    assert_lazy_close(lx * lmask, x * mask)
    assert_lazy_close(lmask.float(), mask.float())
    assert_lazy_close(lmask.sum(), mask.sum())
    assert_lazy_close(lmask & (ly > 0), mask & (y > 0))
    assert_lazy_close(~lmask, ~mask)
    assert_lazy_close(lx.masked_fill(lmask, 0.0), x.masked_fill(mask, 0.0))
    assert_lazy_close(torch.where(lmask, lx, 0.0), torch.where(mask, x, 0.0))


def test_bool_mask_from_cpu():
    x = _inputs((6,), seed=4)[0]
    mask = torch.tensor([True, False, True, True, False, False])
    assert_lazy_close(lazy(x) * lazy(mask), x * mask)
    assert_lazy_close(lazy(mask) + lazy(mask), mask + mask)  # bool + bool stays bool


def test_float64():
    a, b = _inputs((3, 3), (3, 3), seed=5, dtype=torch.float64)
    out = lazy(a) @ lazy(b) + lazy(a).exp()
    assert out.dtype == torch.float64
    # float64 must stay float64 (no demotion to float32): compare tightly.
    assert_lazy_close(out, a @ b + a.exp(), rtol=1e-12, atol=1e-12)


def test_float64_plus_float32():
    a = _inputs((4,), seed=6, dtype=torch.float64)[0]
    b = _inputs((4,), seed=7)[0]
    assert_lazy_close(lazy(a) + lazy(b), a + b)
    assert_lazy_close(lazy(b) + 1e-10, b + 1e-10)


# --------------------------------------------------------------------- matmul
def test_matmul_family():
    a, b, c, bias = _inputs((3, 4), (4, 5), (2, 3, 4), (5,), seed=8)
    d = _inputs((2, 4, 5), seed=9)[0]
    w = _inputs((5, 4), seed=10)[0]
    la, lb, lc, lbias, ld, lw = map(lazy, (a, b, c, bias, d, w))
    assert_lazy_close(la @ lb, a @ b, rtol=1e-5, atol=1e-5)
    assert_lazy_close(torch.mm(la, lb), torch.mm(a, b), rtol=1e-5, atol=1e-5)
    assert_lazy_close(torch.bmm(lc, ld), torch.bmm(c, d), rtol=1e-5, atol=1e-5)
    assert_lazy_close(torch.matmul(lc, lb), torch.matmul(c, b), rtol=1e-5, atol=1e-5)
    assert_lazy_close(F.linear(la, lw, lbias), F.linear(a, w, bias), rtol=1e-5, atol=1e-5)
    assert_lazy_close(F.linear(lc, lw), F.linear(c, w), rtol=1e-5, atol=1e-5)
    assert_lazy_close(torch.addmm(lbias, la, lb), torch.addmm(bias, a, b), rtol=1e-5, atol=1e-5)
    assert_lazy_close(torch.addmm(lbias, la, lb, beta=0.5, alpha=2.0),
                      torch.addmm(bias, a, b, beta=0.5, alpha=2.0), rtol=1e-5, atol=1e-5)


def test_matmul_vector():
    a, v = _inputs((3, 4), (4,), seed=11)
    assert_lazy_close(lazy(a) @ lazy(v), a @ v, rtol=1e-5, atol=1e-5)
    assert_lazy_close(lazy(v) @ lazy(v), v @ v, rtol=1e-5, atol=1e-5)


def test_linear_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    x = _inputs((3, 4), seed=12)[0]
    expected = model(x)
    model.to("lazy")
    for p in model.parameters():
        assert p.device == LAZY
    with torch.no_grad():
        out = model(lazy(x))
    assert_lazy_close(out, expected.detach(), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------- reductions
def test_reductions():
    x = _inputs((3, 5), seed=13)[0]
    lx = lazy(x)
    cases = [
        (lx.sum(), x.sum()),
        (lx.sum(dim=1), x.sum(dim=1)),
        (lx.sum(dim=0, keepdim=True), x.sum(dim=0, keepdim=True)),
        (lx.sum(dim=(0, 1)), x.sum(dim=(0, 1))),
        (lx.mean(), x.mean()),
        (lx.mean(dim=1), x.mean(dim=1)),
        (lx.mean(dim=-1, keepdim=True), x.mean(dim=-1, keepdim=True)),
        (lx.max(), x.max()),
        (lx.amax(dim=0), x.amax(dim=0)),
        (lx.argmax(), x.argmax()),
        (lx.argmax(dim=1), x.argmax(dim=1)),
        (lx.argmax(dim=0, keepdim=True), x.argmax(dim=0, keepdim=True)),
        (lx.softmax(dim=-1), x.softmax(dim=-1)),
        (F.softmax(lx, dim=0), F.softmax(x, dim=0)),
        (F.log_softmax(lx, dim=1), F.log_softmax(x, dim=1)),
    ]
    lm.mark_step()
    for actual, expected in cases:
        assert_lazy_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("keepdim", [False, True])
def test_max_with_dim(keepdim):
    x = _inputs((3, 5), seed=14)[0]
    values, indices = lazy(x).max(dim=1, keepdim=keepdim)
    ev, ei = x.max(dim=1, keepdim=keepdim)
    assert_lazy_close(values, ev)
    assert_lazy_close(indices, ei)
    r = lazy(x).max(0)
    assert_lazy_close(r.values, x.max(0).values)
    assert_lazy_close(r.indices, x.max(0).indices)


@pytest.mark.parametrize("op", ["sort", "topk"])
def test_sort_topk(op):
    x = _inputs((3, 5), seed=18)[0]
    fn = {"sort": lambda t: t.sort(dim=1, descending=True),
          "topk": lambda t: t.topk(2, dim=1)}[op]
    values, indices = fn(lazy(x))
    lm.mark_step()  # values and indices in one graph
    ev, ei = fn(x)
    assert_lazy_close(values, ev)
    assert_lazy_close(indices, ei)


@pytest.mark.parametrize("op", ["sort", "topk"])
def test_sort_topk_leave_their_input_unchanged(op):
    x = torch.tensor([[0.0, 3.0, 1.0, 2.0], [5.0, 4.0, 7.0, 6.0]])
    lx = lazy(x)
    fn = {"sort": lambda t: t.sort(dim=1, descending=True),
          "topk": lambda t: t.topk(2, dim=1)}[op]
    r = fn(lx)
    assert_lazy_close(r.values, fn(x).values)  # a graph with only the values
    assert_lazy_close(r.indices, fn(x).indices)  # then one with only the indices
    assert_lazy_close(lx + 0, x)


def test_integer_sum_dtype():
    i = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    assert_lazy_close(lazy(i).sum(), i.sum())  # int32 sums to int64
    assert_lazy_close(lazy(i).sum(0), i.sum(0))


# ------------------------------------------------------------------- indexing
def test_slicing_and_select():
    x = torch.arange(30.0).reshape(5, 6)
    lx = lazy(x)
    cases = [
        (lx[1:3, ::2], x[1:3, ::2]),
        (lx[:, 0], x[:, 0]),
        (lx[-1], x[-1]),
        (lx[..., -2], x[..., -2]),
        (lx[None, 2:], x[None, 2:]),
        (lx[::2, 1::3], x[::2, 1::3]),
        (lx.t(), x.t()),
        (lx.t()[1:4], x.t()[1:4]),
        (lx.narrow(1, 2, 3), x.narrow(1, 2, 3)),
        (lx.view(3, 10), x.view(3, 10)),
        (lx.reshape(-1), x.reshape(-1)),
        (lx.permute(1, 0).reshape(-1), x.permute(1, 0).reshape(-1)),
        (lx.unsqueeze(1), x.unsqueeze(1)),
        (lx.expand(2, 5, 6), x.expand(2, 5, 6)),
        (lx.diagonal(), x.diagonal()),
    ]
    for actual, expected in cases:
        assert_lazy_close(actual, expected)


def test_index_select_gather():
    x = _inputs((4, 5), seed=15)[0]
    idx = torch.tensor([3, 0, 0, 2])
    gidx = torch.tensor([[0, 4], [1, 1], [2, 0], [4, 3]])
    lx = lazy(x)
    assert_lazy_close(lx.index_select(0, lazy(idx)), x.index_select(0, idx))
    assert_lazy_close(torch.index_select(lx, 1, lazy(idx)), torch.index_select(x, 1, idx))
    assert_lazy_close(torch.gather(lx, 1, lazy(gidx)), torch.gather(x, 1, gidx))
    assert_lazy_close(lx[lazy(idx)], x[idx])
    assert_lazy_close(lx[:, lazy(idx)], x[:, idx])


def test_index_with_cpu_index_tensor():
    x = _inputs((4, 5), seed=19)[0]
    idx = torch.tensor([3, 0, 2])
    assert_lazy_close(lazy(x)[idx], x[idx])
    lx = lazy(x)
    lx[idx] = 0.0
    e = x.clone()
    e[idx] = 0.0
    assert_lazy_close(lx, e)


def test_embedding():
    w = _inputs((6, 3), seed=16)[0]
    ids = torch.tensor([[0, 5], [2, 2]])
    assert_lazy_close(F.embedding(lazy(ids), lazy(w)), F.embedding(ids, w))


# ------------------------------------------------------------------ cat/stack
def test_cat_stack():
    a, b, c = _inputs((2, 3), (2, 3), (1, 3), seed=17)
    la, lb, lc = lazy(a), lazy(b), lazy(c)
    assert_lazy_close(torch.cat([la, lb, lc]), torch.cat([a, b, c]))
    assert_lazy_close(torch.cat([la, lb], dim=1), torch.cat([a, b], dim=1))
    assert_lazy_close(torch.stack([la, lb]), torch.stack([a, b]))
    assert_lazy_close(torch.stack([la, lb], dim=-1), torch.stack([a, b], dim=-1))
    assert_lazy_close(torch.cat([la.t(), lb.t()], dim=1), torch.cat([a.t(), b.t()], dim=1))


# ------------------------------------------------------------ tutorial example
def add_two_maybe(t: torch.Tensor, maybe: torch.Tensor) -> torch.Tensor:
    if maybe:
        return t + 2
    return t


@pytest.mark.parametrize("flag", [1, 0])
def test_add_two_maybe(flag):
    t = torch.ones(1).to("lazy")
    maybe = torch.BoolTensor([flag]).to(lm.lazy_device())
    r = add_two_maybe(t, maybe)
    expected = add_two_maybe(torch.ones(1), torch.BoolTensor([flag]))
    assert r.device == LAZY
    assert torch.equal(r.cpu(), expected)
    assert_lazy_close(r, expected)


def test_bool_of_computed_condition():
    x = lazy(torch.tensor([1.0, -2.0, 3.0]))
    assert bool((x > 0).any())
    assert not bool((x > 5).any())
    if (x.sum() > 1.0):
        y = x * 2
    else:
        y = x
    assert_lazy_close(y, torch.tensor([2.0, -4.0, 6.0]))


# ------------------------------------------------------------------ factories
def test_factories():
    cases = [
        (torch.zeros(2, 3, device="lazy"), torch.zeros(2, 3)),
        (torch.ones(4, device="lazy"), torch.ones(4)),
        (torch.ones(2, 2, dtype=torch.int32, device="lazy"), torch.ones(2, 2, dtype=torch.int32)),
        (torch.full((2, 3), 3.5, device="lazy"), torch.full((2, 3), 3.5)),
        (torch.full((3,), 7, device="lazy"), torch.full((3,), 7)),
        (torch.arange(5, device="lazy"), torch.arange(5)),
        (torch.arange(1.0, 4.0, 0.5, device="lazy"), torch.arange(1.0, 4.0, 0.5)),
        (torch.eye(3, device="lazy"), torch.eye(3)),
        (torch.linspace(0, 1, 5, device="lazy"), torch.linspace(0, 1, 5)),
        (torch.empty(2, 3, device="lazy").fill_(2.0), torch.full((2, 3), 2.0)),
        (torch.tensor([1.5, 2.5], device="lazy"), torch.tensor([1.5, 2.5])),
    ]
    for actual, expected in cases:
        assert_lazy_close(actual, expected)


def test_like_factories():
    x = lazy(torch.randn(2, 3))
    assert_lazy_close(torch.zeros_like(x), torch.zeros(2, 3))
    assert_lazy_close(torch.ones_like(x), torch.ones(2, 3))
    assert_lazy_close(torch.full_like(x, 4.0), torch.full((2, 3), 4.0))
    assert_lazy_close(x.new_zeros(4), torch.zeros(4))
    assert_lazy_close(x.new_ones((1, 2)), torch.ones(1, 2))


def test_randn_matches_cpu_with_same_seed():
    torch.manual_seed(1234)
    lazy_vals = torch.randn(3, 4, device="lazy")
    torch.manual_seed(1234)
    cpu_vals = torch.randn(3, 4)
    assert_lazy_close(lazy_vals, cpu_vals, rtol=0, atol=0)


def test_rand_randint_normal_with_seed():
    torch.manual_seed(7)
    r = torch.rand(5, device="lazy")
    ri = torch.randint(0, 10, (6,), device="lazy")
    ri2 = torch.randint(5, (2, 2), device="lazy")
    n = torch.empty(4, device="lazy").normal_(2.0, 0.5)
    torch.manual_seed(7)
    er = torch.rand(5)
    eri = torch.randint(0, 10, (6,))
    eri2 = torch.randint(5, (2, 2))
    en = torch.empty(4).normal_(2.0, 0.5)
    assert_lazy_close(r, er, rtol=0, atol=0)
    assert_lazy_close(ri, eri, rtol=0, atol=0)
    assert_lazy_close(ri2, eri2, rtol=0, atol=0)
    assert_lazy_close(n, en, rtol=0, atol=0)
    assert ((r.cpu() >= 0) & (r.cpu() < 1)).all()


def test_random_draws_advance_generator():
    torch.manual_seed(3)
    a = torch.randn(4, device="lazy")
    b = torch.randn(4, device="lazy")
    assert not torch.equal(a.cpu(), b.cpu())


# ------------------------------------------- device, shape, dtype and strides
def test_device_shape_dtype_strides():
    x = torch.randn(2, 3, 4)
    lx = lazy(x)
    assert lx.device == torch.device("lazy", 0)
    assert lx.device == lm.lazy_device()
    assert str(lx.device) == "lazy:0"
    assert lx.shape == (2, 3, 4)
    assert lx.dtype == torch.float32
    assert lx.is_contiguous()
    assert lx.stride() == (12, 4, 1)
    y = lx.sum(1)
    assert y.device == LAZY and y.shape == (2, 4) and y.stride() == (4, 1)
    t = lx.transpose(0, 2)
    assert t.shape == (4, 3, 2)
    assert t.stride() == x.transpose(0, 2).stride()
    assert not t.is_contiguous()
    c = t.contiguous()
    assert c.is_contiguous() and c.stride() == (6, 2, 1)
    assert_lazy_close(c, x.transpose(0, 2).contiguous())
    i = lazy(torch.tensor([1, 2]))
    assert i.dtype == torch.int64
    assert (i + 1).dtype == torch.int64
    assert lx.to(torch.float64).dtype == torch.float64
    assert lx.half().dtype == torch.float16


def test_to_lazy_and_back():
    x = torch.randn(3, 2)
    lx = x.to("lazy")
    assert lx.device == LAZY
    assert lx.to("lazy") is lx or lx.to("lazy").device == LAZY
    back = lx.cpu()
    assert back.device == torch.device("cpu")
    torch.testing.assert_close(back, x)
    torch.testing.assert_close(lx.to("cpu"), x)
    torch.testing.assert_close(lx.to(torch.device("cpu"), torch.float64), x.double())
    # The lazy tensor owns a copy: writing the CPU source must not change it.
    src = torch.ones(3)
    lsrc = src.to("lazy")
    src.add_(1)
    torch.testing.assert_close(lsrc.cpu(), torch.ones(3))
    # The host copy is the user's: writing it must not change the lazy tensor.
    back.zero_()
    torch.testing.assert_close(lx.cpu(), x)


# -------------------------------------------------------------- print / repr
@pytest.mark.parametrize("make,expected", [
    (lambda: torch.tensor([3.0]), "tensor([3.], device='lazy:0')"),
    (lambda: torch.tensor(2.5), "tensor(2.5000, device='lazy:0')"),
    (lambda: torch.tensor([1, 2, 3]), "tensor([1, 2, 3], device='lazy:0')"),
    (lambda: torch.tensor([1, 2], dtype=torch.int32),
     "tensor([1, 2], device='lazy:0', dtype=torch.int32)"),
    (lambda: torch.tensor([True, False]), "tensor([ True, False], device='lazy:0')"),
    (lambda: torch.tensor([1.5], dtype=torch.float64),
     "tensor([1.5000], device='lazy:0', dtype=torch.float64)"),
    (lambda: torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
     "tensor([[1., 2.],\n        [3., 4.]], device='lazy:0')"),
    (lambda: torch.zeros(0), "tensor([], device='lazy:0')"),
    (lambda: torch.zeros(0, 3), "tensor([], device='lazy:0', size=(0, 3))"),
])
def test_repr(make, expected):
    x = make()
    lx = lazy(x)
    assert repr(lx) == expected
    assert str(lx) == expected


def test_repr_of_computed_and_summarized(capsys):
    x = torch.tensor([1.0, 2.0])
    y = lazy(x) + 1
    print(y)
    assert capsys.readouterr().out == "tensor([2., 3.], device='lazy:0')\n"
    big = torch.arange(2000.0)
    eager = repr(big)
    assert eager.endswith(")")
    assert repr(lazy(big)) == eager[:-1] + ", device='lazy:0')"


def test_repr_autograd_and_half():
    x = lazy(torch.tensor([1.0, 2.0])).requires_grad_()
    assert repr(x) == "tensor([1., 2.], device='lazy:0', requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 4.], device='lazy:0', grad_fn=<MulBackward0>)"
    h = lazy(torch.tensor([1.5], dtype=torch.float16))
    assert repr(h) == "tensor([1.5000], device='lazy:0', dtype=torch.float16)"
    t = lazy(torch.arange(6.0).reshape(2, 3)).t()
    assert repr(t) == "tensor([[0., 3.],\n        [1., 4.],\n        [2., 5.]], device='lazy:0')"


def test_numpy_raises():
    x = lazy(torch.ones(2))
    with pytest.raises(TypeError, match=r"\.cpu\(\)"):
        x.numpy()
    assert (x.cpu().numpy() == 1).all()


# ----------------------------------------------------------- host values
def test_item_equal():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    lx = lazy(x)
    s = (lx * 2).sum()
    assert s.item() == 20.0
    assert isinstance(s.item(), float)
    assert lazy(torch.tensor(3)).item() == 3
    assert isinstance((lx > 2).sum().item(), int)
    assert torch.equal(lx + 0, lazy(x.clone()))
    assert not torch.equal(lx, lx + 1)
    assert torch.equal((lx * 1).cpu(), x)
    assert float(lx[0, 1]) == 2.0
    assert int(lx[1, 0]) == 3
    assert torch.allclose(lx, lx + 1e-9)


def test_tolist():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert (lazy(x) + 1).tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert lazy(torch.tensor([1, 2])).tolist() == [1, 2]
    assert lazy(torch.tensor(2.5)).tolist() == 2.5


def test_torch_func_hessian_and_forward_over_reverse():
    """Forward-mode AD makes zero tangents with ``_efficientzerotensor``, which
    the lazy device had no kernel for: ``torch.func.hessian`` raised
    NotImplementedError ("Could not run 'aten::_efficientzerotensor' with
    arguments from the 'Lazy' backend")."""
    from torch.func import hessian, jacfwd, jacrev

    def f(v):
        return (v.sin() * v).sum() + (v[:2] * v[1:]).sum()
    x = torch.tensor([0.3, -1.2, 2.0])
    for transform in (hessian(f), jacfwd(jacrev(f))):
        got = transform(x.to("lazy")).cpu()
        torch.testing.assert_close(got, transform(x), rtol=1e-5, atol=1e-6)
