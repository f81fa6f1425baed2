"""``lazy_mlir::fused_adam`` / ``fused_sgd`` (``ops/optim.py``) against
PyTorch's fused CPU kernels, in float64, on CPU tensors (the ops' own CPU
kernels are their decompositions: no compiler involved). Also the stacked
decomposition of foreach ops over 0-dim lists (``ops/foreach.py``)."""
from __future__ import annotations

import itertools

import pytest
import torch

from lazy_mlir.ops import foreach as foreach_ops
from lazy_mlir.ops import optim

F64 = torch.float64
SHAPES = [(3, 4), (5,), (2, 3, 2), (1,)]


def _lists(seed):
    g = torch.Generator().manual_seed(seed)

    def one(scale=1.0, positive=False):
        ts = [torch.randn(s, generator=g, dtype=F64) * scale for s in SHAPES]
        return [t.abs() for t in ts] if positive else ts
    return one(), one(), one(0.1), one(0.01, True), one(0.02, True)


def _close(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-14)


def _betas(beta1, beta2):
    return torch.tensor(optim.adam_betas(beta1, beta2), dtype=F64)


ADAM_CASES = list(itertools.product([False, True], [False, True], [0.0, 0.1], [False, True],
                                    [False, True], [None, 0.0, 1.0]))


@pytest.mark.parametrize("amsgrad,maximize,weight_decay,decoupled,tensor_lr,found",
                         ADAM_CASES)
def test_fused_adam_equals_pytorchs_fused_kernel(amsgrad, maximize, weight_decay, decoupled,
                                                 tensor_lr, found):
    p, g, m, v, big = _lists(len(ADAM_CASES))
    steps = [torch.tensor(float(s)) for s in (1, 2, 7, 100)]  # (per parameter, float32)
    lr = 0.01
    scale = torch.tensor(4.0) if found is not None else None
    found_inf = torch.tensor(found) if found is not None else None
    want = [[t.clone() for t in ts] for ts in (p, g, m, v, big)]
    kernel = torch._fused_adamw_ if decoupled else torch._fused_adam_
    kernel(*want[:4], want[4] if amsgrad else [], steps,
           lr=torch.tensor(lr, dtype=F64) if tensor_lr else lr, beta1=0.9, beta2=0.999,
           weight_decay=weight_decay, eps=1e-8, amsgrad=amsgrad, maximize=maximize,
           grad_scale=scale, found_inf=found_inf)
    got = optim.ops.fused_adam(p, g, m, v, big if amsgrad else [], steps,
                               torch.tensor(lr, dtype=F64), _betas(0.9, 0.999), weight_decay, 1e-8,
                               amsgrad, maximize, decoupled, scale, found_inf)
    expected = [*want[0], *want[2], *want[3], *(want[4] if amsgrad else [])]
    _close(got, expected + (want[1] if scale is not None else []))
    if found == 1.0:  # nothing written
        _close(got[:len(p)], p)


@pytest.mark.parametrize("beta1", [0.0, 0.3, 0.5, 0.95])
def test_fused_adam_lerps_on_either_side_of_the_split(beta1):
    """The first moment's lerp weight ``1 - beta1`` is an input now; both
    sides of the kernel's split at 0.5 give the kernel's result."""
    p, g, m, v, _ = _lists(7)
    steps = [torch.tensor(float(s)) for s in (1, 2, 3, 4)]
    want = [[t.clone() for t in ts] for ts in (p, g, m, v)]
    torch._fused_adam_(*want, [], steps, lr=0.01, beta1=beta1, beta2=0.99, weight_decay=0.0,
                       eps=1e-8, amsgrad=False, maximize=False)
    got = optim.ops.fused_adam(p, g, m, v, [], steps, torch.tensor(0.01, dtype=F64),
                               _betas(beta1, 0.99), 0.0, 1e-8, False, False, False, None, None)
    _close(got, [*want[0], *want[2], *want[3]])


def test_fused_adam_takes_host_step_counts_stacked():
    """Capture stacks host step counts into one [n] tensor: same result."""
    p, g, m, v, _ = _lists(1)
    steps = [torch.tensor(float(s)) for s in (3, 3, 4, 9)]
    args = (torch.tensor(1e-3, dtype=F64), _betas(0.8, 0.99), 0.01, 1e-6, False, False, True,
            None, None)
    one = optim.ops.fused_adam(p, g, m, v, [], [torch.stack(steps)], *args)
    each = optim.ops.fused_adam(p, g, m, v, [], steps, *args)
    _close(one, each)
    with pytest.raises(RuntimeError, match="step counts"):
        optim.ops.fused_adam(p, g, m, v, [], steps[:2], *args)


def test_bias_correction_keeps_float32_close_to_the_double_result():
    """``1 - beta ** step`` loses ~1e-5 relative in float32 at step 1; the
    expm1 form stays within a few ulps of the double result PyTorch's
    kernel computes."""
    step = torch.arange(1, 2000, dtype=torch.float32)
    exact = 1 - 0.999 ** step.double()
    log_betas = torch.tensor([optim.adam_betas(0.999, 0.0)[0], optim.adam_betas(0.0, 0.0)[0]])
    ours = optim._bias_correction(log_betas[0], step).double()
    assert ((ours - exact).abs() / exact).max() < 1e-6
    assert torch.equal(optim._bias_correction(log_betas[1], step), torch.ones_like(step))


SGD_CASES = [c for c in itertools.product([0.0, 0.9], [0.0, 0.1], [False, True], [False, True],
                                          [0.0, 0.01], [False, True], [None, 0.0, 1.0])
             if not (c[2] and (c[0] == 0.0 or c[1] != 0.0))]  # nesterov: momentum, no damping


@pytest.mark.parametrize("momentum,dampening,nesterov,maximize,weight_decay,first,found",
                         SGD_CASES)
def test_fused_sgd_equals_pytorchs_fused_kernel(momentum, dampening, nesterov, maximize,
                                                weight_decay, first, found):
    p, g, buf, _, _ = _lists(len(SGD_CASES))
    scale = torch.tensor(2.0) if found is not None else None
    found_inf = torch.tensor(found) if found is not None else None
    want = [[t.clone() for t in ts] for ts in (p, g, buf)]
    torch._fused_sgd_(want[0], want[1], want[2] if momentum else [], weight_decay=weight_decay,
                      momentum=momentum, lr=0.1, dampening=dampening, nesterov=nesterov,
                      maximize=maximize, is_first_step=first, grad_scale=scale,
                      found_inf=found_inf)
    got = optim.ops.fused_sgd(p, g, buf if momentum else [], torch.tensor(0.1, dtype=F64),
                              weight_decay, torch.tensor(optim.sgd_momentum(momentum, dampening),
                                                         dtype=F64),
                              momentum != 0.0, nesterov, maximize, first,
                              scale, found_inf)
    _close(got, want[0] + (want[2] if momentum else []) + (want[1] if scale is not None else []))


@pytest.mark.parametrize("func,extra", [
    (torch.ops.aten._foreach_add.Scalar, (1,)),
    (torch.ops.aten._foreach_pow.ScalarAndTensor, ()),
    (torch.ops.aten._foreach_mul.List, None),
    (torch.ops.aten._foreach_sqrt.default, ()),
])
def test_foreach_over_zero_dim_lists_runs_once_stacked(func, extra):
    """One op on the stacked list gives each element's per-tensor result
    (and no stacking where a list holds a non-0-dim tensor)."""
    xs = [torch.tensor(float(i) + 1.5) for i in range(5)]
    if func is torch.ops.aten._foreach_pow.ScalarAndTensor:
        args = (0.9, xs)
    elif extra is None:
        args = (xs, [x * 2 for x in xs])
    else:
        args = (xs, *extra)
    how = foreach_ops.plan(func)
    bound = how.bind(args, {})
    assert foreach_ops._stackable(how, bound)
    decomposed = foreach_ops._decomposition(func)(*args)
    for a, b in zip(decomposed, func(*args)):
        assert a.shape == () and torch.equal(a, b)


def test_foreach_lists_with_a_non_zero_dim_tensor_or_two_dtypes_stay_per_element():
    func = torch.ops.aten._foreach_add.Scalar
    how = foreach_ops.plan(func)
    mixed = [torch.tensor(1.0), torch.ones(2)]
    dtypes = [torch.tensor(1.0), torch.tensor(1, dtype=torch.int64)]
    for xs in (mixed, dtypes):
        assert not foreach_ops._stackable(how, how.bind((xs, 1), {}))
        for a, b in zip(foreach_ops._decomposition(func)(xs, 1), func(xs, 1)):
            assert torch.equal(a, b) and a.dtype == b.dtype
