"""``F.ctc_loss`` on lazy tensors: one node forward, one backward.

``aten::ctc_loss`` is CompositeImplicitAutograd: it copies the lengths to
the host and calls ``_ctc_loss`` with them as integer lists, whose kernel
ran eagerly (no lowering, and a ``log_alpha`` sized by the data): the step
of a speech model (wav2vec2's CTC head) stopped for a host round trip in
its forward and its backward. A kernel for the ``AutogradLazy`` key (as
``lazy/rnn.py``'s) records ``lazy_mlir::ctc_loss`` / ``ctc_loss_backward``
instead (``ops/ctc.py``), with the lengths as tensors of the graph: a batch
with other lengths runs the same compiled graph. Lengths given as lists
become device data for the same reason; concatenated (1-d) targets are
padded to ``(batch, numel)`` by a gather (the longest target is data).
Then zero_infinity and the reduction, as ATen's ``ctc_loss_impl``.

PyTorch's path is kept (counted ``ctc_unfused::<why>``) for dtypes other
than float32/float64, integral checks ATen makes, ops denied by a failed
compile, and decompositions switched off.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from ..ops import ctc as _ctc_ops
from . import fused
from .capture import value_of

aten = torch.ops.aten
ops = torch.ops.lazy_mlir
_MEAN, _SUM = 1, 2  # (``reduction``: torch's Reduction enum)


class _CTC(torch.autograd.Function):
    @staticmethod
    def _compiled_autograd_key(ctx):
        """The one-node backward bakes these integers into its graph."""
        return (ctx._autograd_function_id, ctx.blank, int(ctx.zero_infinity), int(ctx.unroll))

    @staticmethod
    def forward(ctx, log_probs, targets, input_lengths, target_lengths, blank, zero_infinity):
        unroll = _ctc_ops.unrolled(log_probs.shape[0])
        nll, log_alpha = ops.ctc_loss.default(log_probs, targets, input_lengths, target_lengths,
                                              blank, unroll)
        ctx.blank, ctx.zero_infinity, ctx.unroll = blank, zero_infinity, unroll
        ctx.save_for_backward(log_probs, targets, input_lengths, target_lengths, nll, log_alpha)
        ctx.mark_non_differentiable(log_alpha)
        return nll, log_alpha

    @staticmethod
    @once_differentiable
    def backward(ctx, grad, _):
        if grad is None or not ctx.needs_input_grad[0]:
            return (None,) * 6
        log_probs, targets, il, tl, nll, log_alpha = ctx.saved_tensors
        out = ops.ctc_loss_backward.default(grad, log_probs, targets, il, tl, nll, log_alpha,
                                            ctx.blank, ctx.zero_infinity, ctx.unroll)
        return (out, None, None, None, None, None)


def _on(device, t):
    """``t`` as a lazy int64 tensor (a list or a CPU tensor: device data)."""
    if not isinstance(t, torch.Tensor):
        t = torch.tensor(list(t), dtype=torch.int64)
    return t.to(device=device, dtype=torch.int64)


def _is_data(t) -> bool:
    """Whether ``t``'s values are on the host already (nothing to compute)."""
    return value_of(t).data is not None


def _bucket(n: int) -> int:
    return max(8, 1 << (n - 1).bit_length())


def _rows(targets, target_lengths, width: int):
    """Concatenated targets as ``(batch, width)``: row ``b`` starts at the
    sum of the lengths before it (entries past its length are don't-care)."""
    n, total = target_lengths.shape[0], targets.shape[0]
    if total == 0:
        return targets.new_zeros((n, width))
    starts = torch.cumsum(target_lengths, 0) - target_lengths
    index = starts.unsqueeze(1) + torch.arange(width, device=targets.device).unsqueeze(0)
    return targets[index.clamp(0, total - 1)]


def _padded(targets, target_lengths):
    """Concatenated targets as rows. Where their values and lengths are both
    data (a ``masked_select`` of the labels, as transformers' CTC heads make
    them, runs on the host: its length is each batch's own) the rows are
    made on the host, as wide as the longest target rounded up to a power of
    two, so the graph keeps its shapes from batch to batch; else on the
    device, as wide as all of them."""
    if _is_data(targets) and _is_data(target_lengths):
        tl = target_lengths.cpu()
        width = _bucket(int(tl.max()) if tl.numel() else 0)
        return _rows(targets.cpu(), tl, width).to(targets.device)
    return _rows(targets, target_lengths, targets.shape[0])


def _host_copy(t):
    """``t``'s values where the host holds them already, else None: looked at,
    not read (a read of the batch while ``compile_train_step`` records would
    make its replay depend on the lengths' values)."""
    data = value_of(t).data
    return None if data is None or data.future is not None else data.host


def _invalid_lengths(steps, targets, il, tl) -> bool:
    """Whether lengths known on the host are ones ATen refuses (its error is
    then raised by its own path); lengths still to be computed are not read."""
    il, tl = _host_copy(il), _host_copy(tl)
    if il is None or tl is None:
        return False
    if bool((il < 0).any() or (il > steps).any() or (tl < 0).any()):
        return True
    if targets.dim() == 2:
        return bool((tl > targets.shape[1]).any())
    return int(tl.sum()) != targets.shape[0]


def _unfused_reason(log_probs, targets, input_lengths, target_lengths, blank) -> str | None:
    if not fused.all_lazy([log_probs]):
        return "log_probs not lazy"
    if log_probs.dtype not in (torch.float32, torch.float64):
        return "not float32/float64"
    if log_probs.dim() not in (2, 3):
        return "log_probs not 2-d or 3-d"
    lengths = [t for t in (input_lengths, target_lengths) if isinstance(t, torch.Tensor)]
    if any(t.dtype.is_floating_point or t.dtype.is_complex or t.dtype is torch.bool
           for t in lengths):
        return "lengths not integral"  # (ATen raises)
    if targets.dtype not in (torch.int64, torch.int32) or targets.dim() not in (1, 2):
        return "targets not 1-d/2-d int64/int32"
    if not 0 <= blank < log_probs.shape[-1]:
        return "blank out of range"  # (ATen raises)
    return fused.compile_reason(ops.ctc_loss.default, ops.ctc_loss_backward.default)


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
             zero_infinity=False, *, op=aten.ctc_loss.Tensor):
    """The ``AutogradLazy`` kernel of ``aten::ctc_loss`` (both overloads)."""
    args = (log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    why = _unfused_reason(log_probs, targets, input_lengths, target_lengths, blank)
    if why is not None:
        return fused.composite("ctc", why, op, *args)
    device = log_probs.device
    batched = log_probs.dim() == 3
    lp = log_probs if batched else log_probs.unsqueeze(1)
    il, tl = _on(device, input_lengths), _on(device, target_lengths)
    tg = targets.to(device=device, dtype=torch.int64)
    if il.numel() != lp.shape[1] or tl.numel() != lp.shape[1] or il.dim() > 1 or tl.dim() > 1 \
            or _invalid_lengths(lp.shape[0], tg, il, tl):
        return fused.composite("ctc", "lengths refused", op, *args)
    il, tl = il.reshape(-1) if il.dim() == 0 else il, tl.reshape(-1) if tl.dim() == 0 else tl
    if tg.dim() == 1:
        tg = _padded(tg, tl)
    res, _ = _CTC.apply(lp, tg, il, tl, blank, zero_infinity)
    if zero_infinity:
        res = torch.where(res == float("inf"), torch.zeros((), dtype=res.dtype, device=device), res)
    if reduction == _MEAN:
        return (res / tl.clamp_min(1)).mean()
    if reduction == _SUM:
        return res.sum()
    return res if batched else res.squeeze(0)


def _int_list_ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1,
                       zero_infinity=False):
    return ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                    zero_infinity, op=aten.ctc_loss.IntList)


def register(lib: torch.library.Library) -> None:
    """Install the kernels on ``lib`` (an ``aten`` IMPL library)."""
    lib.impl("ctc_loss.Tensor", ctc_loss, "AutogradLazy")
    lib.impl("ctc_loss.IntList", _int_list_ctc_loss, "AutogradLazy")
