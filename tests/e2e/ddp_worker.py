"""One rank of test_data_parallel.py's runs (a subprocess per rank).

``python ddp_worker.py RANK WORLD PORT MODE OUT``; MODE is "train" (SGD with
momentum and Adam, synchronised; SGD with the synchronisation off; the
synchronised SGD through lm.compile_train_step), "torch_ddp=RUNS" (the
same training through torch.nn.parallel.DistributedDataParallel itself, RUNS
of "sgd-torch_view", "sgd-torch_copy", "adam-torch_view": bucket views on or
off), "raise" (rank 1
raises at its third step), or "nccl" (one all-reduce on an NCCL group).
Writes its results to OUT (torch.save).
"""
from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

STEPS = 10
GLOBAL_BATCH = 16
WARM_UP = 3  # steps after which no graph may compile any more


def small_cnn() -> nn.Module:
    """A small convolutional net on 1x28x28 digits (compiles in seconds)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 4, 5, stride=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(4 * 6 * 6, 32), nn.ReLU(), nn.Linear(32, 10),
                         nn.LogSoftmax(dim=1))


def optimizer_for(name: str, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.05, momentum=0.9)
    return torch.optim.Adam(params, lr=1e-3)


def batches():
    """The global batches, the same in every process."""
    from lazy_mlir.models.seed import digits
    x, y = digits()[:2]
    return [(x[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH], y[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH])
            for i in range(STEPS)]


def eager_reference(opt_name: str) -> list[torch.Tensor]:
    """Single-process eager training on the whole global batch."""
    model = small_cnn()
    opt = optimizer_for(opt_name, model.parameters())
    for x, y in batches():
        opt.zero_grad(set_to_none=True)
        F.nll_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _wrap(lm, model: nn.Module, wrapper: str) -> nn.Module:
    """``model`` (on the lazy device) under lm.distributed.ddp, or under
    torch's own DistributedDataParallel ("torch_view": gradients are views
    of the reducer's buckets; "torch_copy": copied into them)."""
    if wrapper == "lm":
        return lm.distributed.ddp(model, bucket_mb=0.01)  # several buckets
    return nn.parallel.DistributedDataParallel(
        model, gradient_as_bucket_view=wrapper == "torch_view")


def _train(lm, opt_name: str, sync: bool, step_fn: bool = False, fail_at: int | None = None,
           wrapper: str = "lm"):
    rank, world = dist.get_rank(), dist.get_world_size()
    local = GLOBAL_BATCH // world
    torch.manual_seed(100 + rank)  # ranks start apart: ddp() must broadcast rank 0's weights
    model = small_cnn()
    if rank:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
    model = _wrap(lm, model.to("lazy"), wrapper)
    opt = optimizer_for(opt_name, model.parameters())
    step = lm.compile_train_step(model, F.nll_loss, opt) if step_fn else None
    compiles = []
    for i, (x, y) in enumerate(batches()):
        if i == fail_at:
            raise RuntimeError(f"rank {rank} fails on purpose at step {i}")
        x, y = (t[rank * local:(rank + 1) * local].to("lazy") for t in (x, y))
        if step is not None:
            step(x, y)
        else:
            opt.zero_grad(set_to_none=True)
            if sync:
                F.nll_loss(model(x), y).backward()
            else:
                with model.no_sync():
                    F.nll_loss(model(x), y).backward()
            opt.step()
            lm.mark_step()
        compiles.append(lm.metrics.counter_value("UncachedCompile"))
    return {"params": [p.detach().cpu() for p in model.parameters()],
            "compiles": compiles,
            "all_reduces": lm.metrics.counter_value("sync::all_reduce")}


def _collectives(lm) -> dict:
    """Each way of calling a collective on lazy tensors, on rank-dependent values."""
    import torch.distributed._functional_collectives as funcol
    rank = dist.get_rank()
    out = {}
    t = (torch.arange(4.0) + rank).to("lazy") * 2    # pending: the collective cuts the graph
    dist.all_reduce(t)                              # torch.ops.c10d.allreduce_
    out["dist.all_reduce"] = (t + 1).cpu()
    b = (torch.ones(3) * rank).to("lazy") + 5
    dist.broadcast(b, src=1)                        # torch.ops.c10d.broadcast_
    out["dist.broadcast"] = b.cpu()
    f = funcol.all_reduce((torch.ones(2) * rank).to("lazy") + 1, "avg", dist.group.WORLD)
    out["funcol.all_reduce"] = f.cpu()
    g = lm.distributed.all_gather(torch.full((2,), float(rank)).to("lazy") * 3)
    out["all_gather"] = g.cpu()
    r = lm.distributed.reduce_scatter(torch.arange(4.0).to("lazy") + rank)
    out["reduce_scatter"] = r.cpu()
    return out


def main() -> None:
    rank, world, port, mode, out = sys.argv[1:6]
    rank, world = int(rank), int(world)
    torch.set_num_threads(1)
    import lazy_mlir as lm
    if mode == "nccl":
        torch.cuda.set_device(rank)
    lm.distributed.init("nccl" if mode == "nccl" else "gloo", timeout_s=30, rank=rank,
                        world_size=world,
                        init_method=f"tcp://127.0.0.1:{port}")
    results = {}
    if mode == "train":
        for opt_name in ("sgd", "adam"):
            results[opt_name] = _train(lm, opt_name, sync=True)
        results["no_sync"] = _train(lm, "sgd", sync=False)
        results["collectives"] = _collectives(lm)
        results["step"] = _train(lm, "sgd", sync=True, step_fn=True)
        results["plain_steps"] = lm.metrics.counter_value("TrainStepPlain")
        results["refused"] = lm.metrics.counter_value("TrainStepRefused")
    elif mode.startswith("torch_ddp"):  # "torch_ddp=sgd-torch_view,adam-torch_view"
        for run in mode.partition("=")[2].split(","):
            opt_name, wrapper = run.split("-")
            results[run] = _train(lm, opt_name, sync=True, wrapper=wrapper)
    elif mode == "nccl":  # the NCCL group through the same functions (needs two GPUs)
        x = (torch.arange(4.0) + rank).to("lazy") * 2
        lm.distributed.all_reduce_([x], "avg")
        results["avg"] = x.cpu()
    elif mode == "raise":
        _train(lm, "sgd", sync=True, fail_at=2 if rank == 1 else None)
    torch.save(results, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("LAZY_MLIR_CPU_THREADS", "1")
    main()
