"""Data-parallel training: lazy-mlir (``lm.distributed.ddp``) against eager
PyTorch's ``DistributedDataParallel``, with 1 and 2 gloo ranks of one thread.

    python benchmarks/data_parallel.py [--models cnn,gpt2] [--steps 20] [--warmup 3]
        [--worlds 1,2] [--rounds 3] [--out FILE.md]

Every (model, backend, ranks) row starts its ranks as fresh processes on
127.0.0.1 (``--_worker``); each rank trains on its own batch of the row's
per-rank size (weak scaling: 2 ranks do twice the work of 1 per step). A
step is zero_grad, forward, loss, backward (ending in the gradient
all-reduce), optimizer step (lazy-mlir: then mark_step). Timed: ``--steps``
steps after ``--warmup`` untimed ones (compiles are warm-up), ending with a
read of the loss; steps/s is rank 0's. With ``--rounds R`` the rows run R
times, in turn; the table gives the median and the range of each figure.
``cnn``: the seeds' MnistCNN on the digits, batch 32 per rank, SGD with
momentum; ``gpt2``: the real-model suite's GPT-2 tiny, AdamW.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

RESULT_TAG = "@@RESULT@@"
BACKENDS = ("eager_ddp", "lazy_mlir")


def _model(name: str, device: str):
    """(model, optimizer, batch(step) -> dict, loss(model, batch))."""
    import torch
    import torch.nn.functional as F
    if name == "cnn":
        from lazy_mlir.models.seed import MnistCNN, digits
        torch.manual_seed(0)
        model = MnistCNN(dropout=False).to(device)
        x, y = digits()[:2]

        def batch(step, rank):
            i = (step * 64 + rank * 32) % (len(y) - 32)
            return {"x": x[i:i + 32].to(device), "y": y[i:i + 32].to(device)}
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return model, opt, batch, lambda m, b: F.nll_loss(m(b["x"]), b["y"])
    from lazy_mlir.models.real import real_model
    rm = real_model(name, "tiny")
    model = rm.make().to(device)
    return model, rm.optimizer(model), lambda step, rank: rm.batch(2 * step + rank, device), rm.loss


def worker(model_name: str, backend: str, world: int, rank: int, port: int, steps: int,
           warmup: int) -> None:
    import datetime
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    device = "lazy" if backend == "lazy_mlir" else "cpu"
    if device == "lazy":
        import lazy_mlir as lm
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=600))
    model, opt, batch, loss_of = _model(model_name, device)
    if device == "lazy":
        ddp = lm.distributed.ddp(model)
    else:
        ddp = torch.nn.parallel.DistributedDataParallel(model)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(ddp, batch(i, rank))
        loss.backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
        return loss

    for i in range(warmup):
        step(i).item()
    dist.barrier()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        loss = step(i)
    loss.item()
    seconds = time.perf_counter() - t0
    if rank == 0:
        print(RESULT_TAG, json.dumps({"steps_per_s": steps / seconds, "loss": loss.item()}),
              flush=True)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_row(model: str, backend: str, world: int, steps: int, warmup: int) -> dict:
    port = _free_port()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, OMP_NUM_THREADS="1", LAZY_MLIR_CPU_THREADS="1",
               PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_worker", model,
                               backend, str(world), str(r), str(port), str(steps), str(warmup)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [p.communicate() for p in procs]
    for line in outs[0][0].splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    return {"error": (outs[0][1] or "no result")[-600:]}


def _median_range(values: list) -> tuple:
    values = sorted(v for v in values if v)
    if not values:
        return None, ""
    mid = values[len(values) // 2]
    return mid, f" ({values[0]:.2f}-{values[-1]:.2f})" if len(values) > 1 else ""


def table(results: dict, models, worlds) -> str:
    """Medians over the rounds (range in brackets); ratios are medians of
    the per-round ratios."""
    lines = ["| model | ranks | eager DDP steps/s | lazy-mlir steps/s | lazy-mlir / eager | "
             "lazy-mlir scaling vs 1 rank |", "|---|---|---|---|---|---|"]
    steps = lambda k: [r.get("steps_per_s") for r in results.get(k, [])]  # noqa: E731
    for m in models:
        for w in worlds:
            e, z = steps((m, "eager_ddp", w)), steps((m, "lazy_mlir", w))
            one = steps((m, "lazy_mlir", 1))
            es, er = _median_range(e)
            zs, zr = _median_range(z)
            ratio, rr = _median_range([b / a for a, b in zip(e, z) if a and b])
            scale, sr = _median_range([w * b / a for a, b in zip(one, z) if a and b])
            fmt = lambda v, r: f"{v:.2f}{r}" if v else "error"  # noqa: E731
            lines.append(f"| {m} | {w} | {fmt(es, er)} | {fmt(zs, zr)} | {fmt(ratio, rr)}x | "
                         f"{fmt(scale, sr)}x |")
    errors = [f"{k}: {r['error']}" for k, rs in results.items() for r in rs if "error" in r]
    return "\n".join(lines + ([""] + errors if errors else []))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="cnn,gpt2")
    p.add_argument("--worlds", default="1,2")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default=None)
    p.add_argument("--_worker", nargs=7, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._worker:
        m, b, w, r, port, steps, warmup = a._worker
        return worker(m, b, int(w), int(r), int(port), int(steps), int(warmup))
    models, worlds = a.models.split(","), [int(w) for w in a.worlds.split(",")]
    results: dict = {}
    for _ in range(a.rounds):
        for m in models:
            for w in worlds:
                for b in BACKENDS:
                    r = run_row(m, b, w, a.steps, a.warmup)
                    results.setdefault((m, b, w), []).append(r)
                    print(m, b, w, r, file=sys.stderr, flush=True)
    text = table(results, models, worlds)
    text += ("\n\nsamples/step scale with the ranks (each rank its own batch); scaling = "
             "ranks x steps/s / (1-rank steps/s); one thread per rank")
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
