"""Data-parallel training on the lazy device over ``torch.distributed``.

Run one process per replica (``torchrun --nproc-per-node N train.py``), each
with its own share of the batch::

    import lazy_mlir as lm
    lm.distributed.init()                        # init_process_group("gloo") from torchrun's env
    model = lm.distributed.ddp(Net().to("lazy")) # rank 0's weights everywhere; grads averaged
    for x, y in loader:                          # this rank's shard
        optimizer.zero_grad(set_to_none=True)
        F.nll_loss(model(x.to("lazy")), y.to("lazy")).backward()   # ends in the all-reduce
        optimizer.step()
        lm.mark_step()

``torch.nn.parallel.DistributedDataParallel(model.to("lazy"))`` itself works
too, with ``gradient_as_bucket_view`` True or False: its C++ reducer's
``allreduce_``/``broadcast_`` reach this package's collectives through
``torch.ops.c10d`` and its bucket views are ordinary lazy views (tested against
eager on the whole batch: SGD with momentum and Adam). Its reducer cuts the
graph at every bucket that becomes ready during backward. ``ddp`` is the
lighter wrapper: it averages the gradients once per backward, in buckets of
``bucket_mb`` (one all-reduce per bucket, all in flight at once): a step is
two compiled graphs, the forward and backward up to the all-reduce, and the
optimizer after it.
``reduce_gradients(optimizer_or_params)`` does the same by hand, in
PyTorch/XLA's style (call it between ``backward()`` and ``optimizer.step()``).

``lm.compile_train_step`` runs such a step as the plain lazy step (the
all-reduce is a host sync between two graphs, which a replayed single graph
cannot hold); it says so once in the log.

Also: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast_`` on
lazy tensors, and PyTorch's functional collectives
(``torch.distributed._functional_collectives.all_reduce(t, "sum", group)``)
called on lazy tensors. The process group is PyTorch's own: gloo on the CPU;
an NCCL group is reached through the same functions with the host data staged
on the GPU (untested here: no machine has two GPUs).
"""
from __future__ import annotations

import contextlib
import datetime
import os

import torch
import torch.distributed as dist

from ..lazy.collectives import (BUCKET_BYTES, all_gather, all_reduce, all_reduce_, broadcast_,
                                buckets, reduce_scatter)
from ..lazy.tensor import LazyTensor

__all__ = ["init", "ddp", "DataParallel", "reduce_gradients", "all_reduce", "all_reduce_",
           "all_gather", "reduce_scatter", "broadcast_", "buckets", "BUCKET_BYTES"]


def init(backend: str = "gloo", timeout_s: float = 300.0, **kwargs) -> None:
    """``torch.distributed.init_process_group`` from the environment torchrun
    sets (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), with a
    timeout: a rank whose peer died raises after ``timeout_s`` at most
    instead of waiting forever."""
    if dist.is_initialized():
        return
    missing = [k for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
               if k not in os.environ and k.lower() not in kwargs]
    if missing and "init_method" not in kwargs and "store" not in kwargs:
        raise RuntimeError(f"lazy-mlir: distributed.init: {', '.join(missing)} not set; run under "
                           "`torchrun --nproc-per-node N script.py` or pass rank=, world_size= "
                           "and init_method='tcp://127.0.0.1:PORT'")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs)


def _params_of(params_or_optimizer) -> list:
    if isinstance(params_or_optimizer, torch.optim.Optimizer):
        return [p for g in params_or_optimizer.param_groups for p in g["params"]]
    if isinstance(params_or_optimizer, torch.nn.Module):
        return list(params_or_optimizer.parameters())
    return list(params_or_optimizer)


def reduce_gradients(params_or_optimizer, group=None, bucket_mb: float = 25.0) -> None:
    """Average the gradients of these parameters (an optimizer's, a module's,
    or a list) across the group, in place, in buckets of ``bucket_mb``.
    Every rank must call it with the same parameters having gradients."""
    grads = [p.grad for p in _params_of(params_or_optimizer) if p.grad is not None]
    if grads:
        all_reduce_(grads, "avg", group, int(bucket_mb * 1024 * 1024))


class DataParallel(torch.nn.Module):
    """``module`` with its gradients averaged across the group at the end of
    every backward (see ``ddp``). ``no_sync()`` skips that (gradient
    accumulation); ``self.module`` is the wrapped model."""

    def __init__(self, module: torch.nn.Module, group=None, bucket_mb: float = 25.0,
                 broadcast_from: int | None = 0):
        super().__init__()
        params = [p for p in module.parameters() if p.requires_grad]
        if not all(isinstance(t, LazyTensor) for t in list(module.parameters())
                   + list(module.buffers())):
            raise TypeError("lazy-mlir: distributed.ddp takes a model on the lazy device: "
                            "move it with model.to('lazy') first")
        if not dist.is_initialized():
            raise RuntimeError("lazy-mlir: distributed.ddp needs torch.distributed initialized: "
                               "call lm.distributed.init() (under torchrun) first")
        self.module = module
        self.group = group
        self.bucket_mb = bucket_mb
        self.require_backward_grad_sync = True
        self._queued = False
        if broadcast_from is not None:  # every rank starts from the same weights, as DDP does
            state = list(module.parameters()) + list(module.buffers())
            broadcast_(state, broadcast_from, group)
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in params]

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards inside leave the gradients local (they accumulate)."""
        was = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = was

    def _on_grad(self, param) -> None:
        # Once per backward, after every gradient is accumulated: the engine's
        # end-of-backward callback (DDP's C++ reducer finalizes the same way).
        if self.require_backward_grad_sync and not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._reduce)

    def _reduce(self) -> None:
        self._queued = False
        reduce_gradients(self.module, self.group, self.bucket_mb)


def ddp(model: torch.nn.Module, group=None, bucket_mb: float = 25.0,
        broadcast_from: int | None = 0) -> DataParallel:
    """Data-parallel ``model`` (on the lazy device): rank ``broadcast_from``'s
    parameters and buffers are copied to every rank now, and every backward
    ends by averaging the gradients across ``group`` (default: the world),
    one all-reduce per bucket of ``bucket_mb`` MB. Train the returned module
    as the model; each rank feeds its own shard of the batch."""
    return DataParallel(model, group, bucket_mb, broadcast_from)
