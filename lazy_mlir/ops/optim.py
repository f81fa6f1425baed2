"""Fused optimizer updates (``torch._fused_adam_``, ``_fused_adamw_``,
``_fused_sgd_``) as ONE graph node each.

torch.optim's fused path (``Adam(..., fused=True)``, AdamW, SGD) makes one
aten call for a whole parameter group's update; ``lazy/fused_optim.py``
records it as one of the ops defined here, with an output per tensor the
kernel writes, and writes them back:

- ``lazy_mlir::fused_adam``: ``[params, exp_avgs, exp_avg_sqs,
  max_exp_avg_sqs (amsgrad), grads (grad_scale given)]``, one list;
  ``decoupled`` says AdamW.
- ``lazy_mlir::fused_sgd``: ``[params, momentum buffers (momentum != 0),
  grads (grad_scale given)]``.

The learning rate is a 0-dim tensor argument (a float lr is lifted to one by
capture), and so are Adam's betas and SGD's momentum (``adam_betas``,
``sgd_momentum``: one small vector each), so a schedule changes an input,
not the graph. The step counts are
a list of 0-dim tensors or ONE 1-d tensor of them (host counts, stacked by
capture); the bias corrections are computed on them stacked, as one [n]
vector: a few vector ops for every parameter instead of a chain of 0-dim
ops per parameter (capturable AdamW's foreach path leaves 29 such chains in
GPT-2's step-1 graph, and IREE's compile time grows with them).

Both become aten ops on the fx graph before import (IMPORT scope). The
functions are also the ops' CPU kernels, so tests compare them with
PyTorch's fused CPU kernels directly. The arithmetic follows those kernels
(``aten/src/ATen/native/cpu/FusedAdamKernel.cpp``, ``FusedSGDKernel.cpp``)
operation by operation: the gradient divided by ``grad_scale`` (and
written back), negated for ``maximize``, weight decay added to it (Adam,
SGD) or applied to the parameter as ``p * (1 - lr * wd)`` (AdamW), the
first moment as ``lerp(m, g, 1 - beta1)`` the way the kernel splits it at
a weight of 0.5, ``v * beta2 + (1 - beta2) * g * g``, the AMSGrad maximum,
``denom = sqrt(v) / sqrt(bc2) + eps``, ``p + (-lr / bc1) * m / denom``; a
``found_inf`` of 1 leaves every tensor as it was. Where the kernel computes
a hyperparameter's product in double (``1 - lr * wd``, ``lr / bc1``) the
graph does it in the parameters' dtype; the bias corrections ``1 - beta **
step`` are computed as ``-expm1(step * log(beta))``, which keeps float32
within a few ulps of the kernel's double result (``1 - pow`` in float32
loses ~1e-5 relative to cancellation at early steps).
"""
from __future__ import annotations

import math

import torch

from .registry import IMPORT, register_decomposition

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")  # (rnn.py adds ops to it too)
_LIB.define("fused_adam(Tensor[] params, Tensor[] grads, Tensor[] exp_avgs, "
            "Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs, Tensor[] steps, Tensor lr, "
            "Tensor betas, float weight_decay, float eps, bool amsgrad, "
            "bool maximize, bool decoupled, Tensor? grad_scale, Tensor? found_inf) -> Tensor[]")
_LIB.define("fused_sgd(Tensor[] params, Tensor[] grads, Tensor[] momentum_buffers, Tensor lr, "
            "float weight_decay, Tensor momentum, bool with_momentum, bool nesterov, "
            "bool maximize, bool is_first_step, Tensor? grad_scale, Tensor? found_inf) "
            "-> Tensor[]")

ops = torch.ops.lazy_mlir


def _stacked_steps(steps, n: int, dtype) -> torch.Tensor:
    """The step counts as one [n] vector of ``dtype``."""
    if len(steps) == 1 and steps[0].dim() == 1:  # host counts, stacked by capture
        s = steps[0]
    elif len(steps) == n:
        s = torch.stack([t.reshape(()) for t in steps])
    else:
        raise RuntimeError(f"fused optimizer: {n} parameters but {len(steps)} step counts")
    if s.shape != (n,):
        raise RuntimeError(f"fused optimizer: {n} parameters but step counts of shape "
                           f"{tuple(s.shape)}")
    return s.to(dtype)


def hyper_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the hyperparameter tensors of an update of ``dtype``
    parameters: at least float32 (beta2 = 0.999 is 1.0 in bfloat16)."""
    return torch.promote_types(dtype, torch.float32)


def adam_betas(beta1: float, beta2: float) -> tuple[float, ...]:
    """``fused_adam``'s ``betas`` argument, computed in double as PyTorch's
    kernel computes them: ``(log beta1, 1 - beta1, beta2, 1 - beta2, log
    beta2)``. A tensor, not constants of the graph: OneCycleLR and CyclicLR
    change beta1 every step (``cycle_momentum``), and as constants each step
    was a new graph to compile."""
    return (_log(beta1), 1.0 - beta1, beta2, 1.0 - beta2, _log(beta2))


def sgd_momentum(momentum: float, dampening: float) -> tuple[float, float]:
    """``fused_sgd``'s ``momentum`` argument: ``(momentum, 1 - dampening)``
    (a tensor for the same reason as ``adam_betas``)."""
    return (momentum, 1.0 - dampening)


def _log(beta: float) -> float:
    return math.log(beta) if beta > 0.0 else -math.inf  # (0 ** step is 0: see below)


def _bias_correction(log_beta: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """``1 - beta ** step``, elementwise, without float32's cancellation
    (``log_beta`` -inf for a beta of 0: steps start at 1, so it is 1)."""
    return -torch.expm1(step * log_beta)


def _lerp(m, g, weight: torch.Tensor):
    """``m.lerp(g, weight)`` split at 0.5 as PyTorch's kernels split it
    (``weight`` 0-dim: both sides of the split are one expression)."""
    low = weight.abs() < 0.5
    return torch.where(low, m, g) + (g - m) * torch.where(low, weight, weight - 1.0)


def _flat(t):
    """``t`` as a matrix of its first dimension's rows. The update is
    elementwise; written on a conv weight's own four dimensions, its
    gradient the ``[O, C*K]`` result of a matmul (``passes/conv_matmul``)
    viewed as ``[O, C, KH, KW]``, IREE moved the reshape onto the moments'
    updates, which then no longer had the parameter's iteration space: three
    dispatches, the first moment, the second and the parameter, each
    reading the last one's result again (40 bytes an element against 28).
    As matrices, every operand has the gradient's own shape and the update
    is one dispatch with three results."""
    return t.reshape(t.shape[0], -1) if t.dim() > 2 else t


def _unscaled(g, grad_scale):
    return g if grad_scale is None else g / grad_scale.reshape(()).to(g.dtype)


def _keep_on_inf(found_inf, old: list, new: list) -> list:
    """``new``, or ``old`` everywhere when ``found_inf`` is 1 (the kernels
    then return before writing anything)."""
    if found_inf is None:
        return new
    skip = found_inf.reshape(()) == 1.0
    return [torch.where(skip, o, n) for o, n in zip(old, new)]


def fused_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, betas,
               weight_decay: float, eps: float, amsgrad: bool,
               maximize: bool, decoupled: bool, grad_scale=None, found_inf=None) -> list:
    """The new ``[params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs (amsgrad),
    grads (grad_scale)]`` of one fused Adam/AdamW step (see the module
    docstring)."""
    n = len(params)
    if n == 0:
        return []
    dtype = params[0].dtype
    lr = lr.reshape(()).to(dtype)
    step = _stacked_steps(steps, n, dtype)
    log_beta1, one_minus_beta1, beta2, one_minus_beta2, log_beta2 = betas.unbind()
    neg_step_sizes = -(lr / _bias_correction(log_beta1, step))  # [n]
    bc2_sqrts = torch.sqrt(_bias_correction(log_beta2, step))  # [n]
    decay = 1.0 - lr * weight_decay if decoupled and weight_decay != 0.0 else None
    new_p, new_m, new_v, new_max, new_g = [], [], [], [], []
    for i in range(n):
        neg_step_size, bc2_sqrt = neg_step_sizes[i], bc2_sqrts[i]
        shape = params[i].shape
        p, g = _flat(params[i]), _flat(_unscaled(grads[i], grad_scale))
        new_g.append(g.reshape(shape))
        if maximize:
            g = -g
        if weight_decay != 0.0:
            if decoupled:
                p = p * decay
            else:
                g = g + p * weight_decay
        m = _lerp(_flat(exp_avgs[i]), g, one_minus_beta1)
        v = _flat(exp_avg_sqs[i]) * beta2 + (g * one_minus_beta2) * g
        if amsgrad:
            big = torch.maximum(_flat(max_exp_avg_sqs[i]), v)
            new_max.append(big.reshape(shape))
            denom = torch.sqrt(big) / bc2_sqrt + eps
        else:
            denom = torch.sqrt(v) / bc2_sqrt + eps
        new_p.append((p + (neg_step_size * m) / denom).reshape(shape))
        new_m.append(m.reshape(shape))
        new_v.append(v.reshape(shape))
    old = [*params, *exp_avgs, *exp_avg_sqs]
    new = [*new_p, *new_m, *new_v]
    if amsgrad:
        old, new = old + list(max_exp_avg_sqs), new + new_max
    if grad_scale is not None:
        old, new = old + list(grads), new + new_g
    return _keep_on_inf(found_inf, old, new)


def fused_sgd(params, grads, momentum_buffers, lr, weight_decay: float, momentum,
              with_momentum: bool, nesterov: bool, maximize: bool, is_first_step: bool,
              grad_scale=None, found_inf=None) -> list:
    """The new ``[params, momentum buffers (momentum != 0), grads
    (grad_scale)]`` of one fused SGD step."""
    n = len(params)
    if n == 0:
        return []
    neg_lr = -lr.reshape(()).to(params[0].dtype)
    momentum, one_minus_dampening = momentum.unbind()
    new_p, new_b, new_g = [], [], []
    for i in range(n):
        p, g = params[i], _unscaled(grads[i], grad_scale)
        new_g.append(g)
        if maximize:
            g = -g
        if weight_decay != 0.0:
            g = g + p * weight_decay
        if with_momentum:
            if is_first_step:
                b = g
            else:
                b = momentum_buffers[i] * momentum + g * one_minus_dampening
            new_b.append(b)
            g = g + b * momentum if nesterov else b
        new_p.append(p + g * neg_lr)
    old, new = list(params), new_p
    if with_momentum:
        old, new = old + list(momentum_buffers), new + new_b
    if grad_scale is not None:
        old, new = old + list(grads), new + new_g
    return _keep_on_inf(found_inf, old, new)


def _adam_shapes(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr, betas,
                 weight_decay, eps, amsgrad, maximize, decoupled, grad_scale=None,
                 found_inf=None):
    written = [*params, *exp_avgs, *exp_avg_sqs, *(max_exp_avg_sqs if amsgrad else ())]
    written += list(grads) if grad_scale is not None else []
    return [torch.empty_like(t) for t in written]


def _sgd_shapes(params, grads, momentum_buffers, lr, weight_decay, momentum, with_momentum,
                nesterov, maximize, is_first_step, grad_scale=None, found_inf=None):
    written = [*params, *(momentum_buffers if with_momentum else ())]
    written += list(grads) if grad_scale is not None else []
    return [torch.empty_like(t) for t in written]


for _name, _fn, _shapes in (("fused_adam", fused_adam, _adam_shapes),
                            ("fused_sgd", fused_sgd, _sgd_shapes)):
    _LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(_fn)
