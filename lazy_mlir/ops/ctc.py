"""CTC loss as two compiled nodes: ``lazy_mlir::ctc_loss`` (the alphas and
the loss) and ``lazy_mlir::ctc_loss_backward`` (the betas and the gradient),
what ATen's CPU kernels compute (``ATen/native/LossCTC.cpp``: Graves et al.
2006, in log space), vectorised over the batch and the extended labels.

ATen's ``_ctc_loss`` reads the lengths on the host (its kernels loop to each
sample's own length) and sizes ``log_alpha`` by the longest target, so on
the lazy device it ran eagerly: a host round trip in the middle of every
step of a speech model (``lazy/ctc.py`` records these nodes instead). Here
the lengths are tensors of the graph, so a batch with other lengths is the
same graph, and the shapes come from the targets' padded width ``S``
(``targets``: ``(batch, S)``; the recording pads concatenated targets):

- ``log_alpha``: ``(T, batch, 2S + 1)``, time-major (the loop's rows);
  entries past a sample's ``2 * target_length + 1`` states are ``-inf``;
- the recursions run over every time step; a sample's loss reads its alphas
  at ``input_length - 1``, its betas start there, and its gradient is 0 past
  its length, as ATen's.

Each log-sum-exp of three terms subtracts their max (0 where all are
``-inf``), as ATen's; the per-label sums of ``alpha * beta`` are one batched
matmul of ``exp(ab - max)`` (the max over the states of a time step) with
the one-hot labels of the states, where ATen adds them one state at a time:
equal up to rounding. Recursions of up to ``UNROLL_STEPS`` time steps are
unrolled, longer ones are loops (``ops/loops.scan``).

The ops' CPU kernels (a graph run eagerly) are ATen's own, re-laid out.
"""
from __future__ import annotations

import math

import torch

from .loops import as_traced_loops, scan
from .registry import IMPORT, register_decomposition

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("ctc_loss(Tensor log_probs, Tensor targets, Tensor input_lengths, "
            "Tensor target_lengths, int blank, bool unroll) -> Tensor[]")
_LIB.define("ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, "
            "Tensor input_lengths, Tensor target_lengths, Tensor neg_log_likelihood, "
            "Tensor log_alpha, int blank, bool zero_infinity, bool unroll) -> Tensor")

ops = torch.ops.lazy_mlir
aten = torch.ops.aten

UNROLL_STEPS = 64  # (as ``ops/rnn.UNROLL_STEPS``: compile time against loop overhead)


def unrolled(steps: int) -> bool:
    return steps <= UNROLL_STEPS


def _extended(targets, blank: int):
    """The extended labels ``l'`` (blank, l1, blank, l2, ..., blank):
    ``(batch, 2S + 1)`` int64."""
    n, s = targets.shape
    t = targets.to(torch.int64)
    blanks = torch.full((n, s + 1), blank, dtype=torch.int64, device=t.device)
    pairs = torch.stack([blanks[:, :s], t], dim=2).reshape(n, 2 * s)
    return torch.cat([pairs, blanks[:, s:]], dim=1)


def _states(targets, target_lengths, blank: int, log_probs):
    """(extended labels, states in use ``s < 2L + 1``, each state's log
    probability per time step ``(T, batch, 2S + 1)``)."""
    ext = _extended(targets, blank)
    width = ext.shape[1]
    s = torch.arange(width, dtype=torch.int64, device=ext.device)
    valid = s.unsqueeze(0) < (2 * target_lengths.to(torch.int64) + 1).unsqueeze(1)
    steps = log_probs.shape[0]
    lpe = log_probs.gather(2, ext.unsqueeze(0).expand(steps, *ext.shape))
    return ext, s, valid, lpe


def _shifted(x, by: int, fill):
    """``x[:, s - by]`` (``by`` > 0) or ``x[:, s + |by|]``, ``fill`` off the end."""
    width = x.shape[1]
    k = min(abs(by), width)
    pad = torch.full((x.shape[0], k), fill, dtype=x.dtype, device=x.device)
    if by > 0:
        return torch.cat([pad, x[:, :width - k]], dim=1)
    return torch.cat([x[:, k:], pad], dim=1)


def _log_add3(a, b, c):
    """ATen's ``log(exp(a-m) + exp(b-m) + exp(c-m)) + m``, ``m`` the max (0
    where all three are ``-inf``)."""
    m = torch.maximum(torch.maximum(a, b), c)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
    return torch.log(torch.exp(a - m) + torch.exp(b - m) + torch.exp(c - m)) + m


def _alpha_step(carries, x, consts):
    (alpha,), (lp_t,), (skip, valid) = carries, x, consts
    neg = torch.full_like(alpha, -math.inf)
    from_skip = torch.where(skip, _shifted(alpha, 2, -math.inf), neg)
    new = _log_add3(alpha, _shifted(alpha, 1, -math.inf), from_skip) + lp_t
    new = torch.where(valid, new, neg)
    return (new,), (new,)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, unroll):
    """``[neg_log_likelihood (batch,), log_alpha (T, batch, 2S + 1)]``."""
    steps, batch, _ = log_probs.shape
    ext, s, valid, lpe = _states(targets, target_lengths, blank, log_probs)
    il, tl = input_lengths.to(torch.int64), target_lengths.to(torch.int64)
    neg = torch.full(ext.shape, -math.inf, dtype=log_probs.dtype, device=log_probs.device)
    first = (s == 0).unsqueeze(0) | ((s == 1).unsqueeze(0) & (tl > 0).unsqueeze(1))
    alpha0 = torch.where(first, lpe[0], neg)
    skip = (s >= 2).unsqueeze(0) & (ext != _shifted(ext, 2, -1))
    _, ys = scan(_alpha_step, steps - 1, (alpha0,), (lpe[1:],), (skip, valid),
                 ys_shapes=(tuple(ext.shape),), unroll=unroll)
    rows = [alpha0.unsqueeze(0)] + ([y.unsqueeze(0) for y in ys[0]] if unroll else [ys[0]])
    log_alpha = torch.cat(rows, dim=0)
    last = (il - 1).clamp_min(0).reshape(1, batch, 1).expand(1, batch, ext.shape[1])
    at_end = log_alpha.gather(0, last).squeeze(0)  # (batch, 2S + 1)
    l1 = at_end.gather(1, (2 * tl).unsqueeze(1)).squeeze(1)
    l2 = at_end.gather(1, (2 * tl - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
    l2 = torch.where(tl > 0, l2, torch.full_like(l2, -math.inf))
    m = torch.maximum(l1, l2)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
    nll = -(torch.log(torch.exp(l1 - m) + torch.exp(l2 - m)) + m)
    empty = torch.where(tl == 0, torch.zeros_like(nll), torch.full_like(nll, math.inf))
    return [torch.where(il == 0, empty, nll), log_alpha]


def _beta_step(carries, x, consts):
    (beta,), (lp_t, t), (skip, valid, below, init, end) = carries, x, consts
    neg = torch.full_like(beta, -math.inf)
    from_next = torch.where(below, _shifted(beta, -1, -math.inf), neg)
    from_skip = torch.where(skip, _shifted(beta, -2, -math.inf), neg)
    rec = torch.where(valid, _log_add3(beta, from_next, from_skip) + lp_t, neg)
    new = torch.where((t == end).unsqueeze(1), init,
                      torch.where((t < end).unsqueeze(1), rec, neg))
    return (new,), (new,)


def ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                      neg_log_likelihood, log_alpha, blank, zero_infinity, unroll):
    """The gradient of the per-sample losses w.r.t. ``log_probs``, ATen's
    formula ``(exp(lp) - exp(lcab + nll - lp)) * grad``."""
    steps, batch, classes = log_probs.shape
    ext, s, valid, lpe = _states(targets, target_lengths, blank, log_probs)
    il, tl = input_lengths.to(torch.int64), target_lengths.to(torch.int64)
    width = ext.shape[1]
    end = il - 1
    two_l = (2 * tl).unsqueeze(1)
    below = s.unsqueeze(0) < two_l
    skip = (s.unsqueeze(0) < two_l - 1) & (_shifted(ext, -2, -1) != ext)
    lp_end = lpe.gather(0, end.clamp_min(0).reshape(1, batch, 1).expand(1, batch, width))
    last_two = (s.unsqueeze(0) == two_l) | ((s.unsqueeze(0) == two_l - 1) & (two_l > 0))
    init = torch.where(last_two, lp_end.squeeze(0), torch.full_like(lp_end.squeeze(0), -math.inf))
    times = torch.arange(steps, dtype=torch.int64, device=log_probs.device)
    beta_start = torch.full((batch, width), -math.inf, dtype=log_probs.dtype,
                            device=log_probs.device)
    _, ys = scan(_beta_step, steps, (beta_start,), (lpe, times), (skip, valid, below, init, end),
                 ys_shapes=((batch, width),), reverse=True, unroll=unroll)
    log_beta = torch.stack(ys[0]) if unroll else ys[0]
    ab = log_alpha + log_beta  # (T, batch, 2S + 1)
    m = ab.amax(dim=2, keepdim=True)
    m = torch.where(m == -math.inf, torch.zeros_like(m), m)
    labels = (ext.unsqueeze(2) == torch.arange(classes, device=ext.device)) & valid.unsqueeze(2)
    summed = torch.bmm(torch.exp(ab - m).permute(1, 0, 2), labels.to(ab.dtype))  # (batch, T, C)
    lcab = torch.log(summed.permute(1, 0, 2)) + m
    nll = neg_log_likelihood.reshape(1, batch, 1)
    out = (torch.exp(log_probs) - torch.exp(lcab + nll - log_probs)) * grad.reshape(1, batch, 1)
    keep = times.reshape(steps, 1, 1) < il.reshape(1, batch, 1)
    if zero_infinity:
        keep = keep & (nll != math.inf)
    return torch.where(keep, out, torch.zeros_like(out))


def _cpu_ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, unroll):
    """ATen's kernel, its ``log_alpha`` laid out as the node's."""
    nll, alpha = aten._ctc_loss.Tensor(log_probs, targets, input_lengths, target_lengths, blank)
    width = 2 * targets.shape[1] + 1
    out = torch.full((log_probs.shape[0], log_probs.shape[1], width), -math.inf,
                     dtype=log_probs.dtype)
    out[:, :, :alpha.shape[2]] = alpha.permute(1, 0, 2)
    return [nll, out]


def _cpu_ctc_loss_backward(grad, log_probs, targets, input_lengths, target_lengths,
                           neg_log_likelihood, log_alpha, blank, zero_infinity, unroll):
    return aten._ctc_loss_backward.Tensor(grad, log_probs, targets, input_lengths,
                                          target_lengths, neg_log_likelihood,
                                          log_alpha.permute(1, 0, 2), blank, zero_infinity)


def _ctc_loss_shapes(log_probs, targets, input_lengths, target_lengths, blank, unroll):
    steps, batch, _ = log_probs.shape
    return [log_probs.new_empty((batch,)),
            log_probs.new_empty((steps, batch, 2 * targets.shape[1] + 1))]


def _ctc_loss_backward_shapes(grad, log_probs, *rest):
    return log_probs.new_empty(log_probs.shape)


for _name, _fn, _cpu, _shapes in (
        ("ctc_loss", ctc_loss, _cpu_ctc_loss, _ctc_loss_shapes),
        ("ctc_loss_backward", ctc_loss_backward, _cpu_ctc_loss_backward,
         _ctc_loss_backward_shapes)):
    _LIB.impl(_name, _cpu, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(as_traced_loops(_fn))
