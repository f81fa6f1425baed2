"""Data-parallel training on the lazy device: the seeds' CNN on the digits.

Run: torchrun --nproc-per-node 2 examples/ddp_train.py [--steps 20] [--step-fn] [--lm-ddp]

Each rank trains on its own half of every global batch under
``torch.nn.parallel.DistributedDataParallel`` on the lazy device (its reducer
averages the gradients with gloo all-reduces), so the ranks keep identical
weights. ``--lm-ddp`` uses lazy-mlir's lighter wrapper ``lm.distributed.ddp``
instead (one bucketed all-reduce at the end of every backward).
``--step-fn`` runs the same step through ``lm.compile_train_step``.
"""
from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.models.seed import MnistCNN, digits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--lm-ddp", action="store_true", help="use lm.distributed.ddp")
    ap.add_argument("--step-fn", action="store_true", help="use lm.compile_train_step")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    lm.distributed.init("gloo", timeout_s=120)
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"--global-batch {args.global_batch} must divide by {world} ranks")
    local = args.global_batch // world

    torch.manual_seed(rank)  # different initial weights: both wrappers broadcast rank 0's
    if args.lm_ddp:
        model = lm.distributed.ddp(MnistCNN().to("lazy"))
    else:
        model = torch.nn.parallel.DistributedDataParallel(MnistCNN().to("lazy"))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x_train, y_train, x_test, y_test = digits()
    step = lm.compile_train_step(model, F.nll_loss, optimizer) if args.step_fn else None

    for i in range(args.steps):
        start = (i * args.global_batch) % (len(y_train) - args.global_batch)
        shard = slice(start + rank * local, start + (rank + 1) * local)  # this rank's half
        x, y = x_train[shard].to("lazy"), y_train[shard].to("lazy")
        if step is not None:
            loss = step(x, y)
        else:
            optimizer.zero_grad(set_to_none=True)
            loss = F.nll_loss(model(x), y)
            loss.backward()  # the gradients' bucketed all-reduces
            optimizer.step()
            lm.mark_step()
        if i % 5 == 0 or i == args.steps - 1:
            print(f"rank {rank} step {i:3d} loss {loss.item():.4f}", flush=True)

    model.eval()
    with torch.no_grad():
        pred = model(x_test.to("lazy")).argmax(1).cpu()
    accuracy = (pred == y_test).float().mean().item()
    checksum = sum(p.detach().cpu().double().sum().item() for p in model.parameters())
    print(f"rank {rank} test accuracy {accuracy:.3f} weight checksum {checksum:.6f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
