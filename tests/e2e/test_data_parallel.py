"""Data-parallel training over torch.distributed: two real gloo ranks on
127.0.0.1, each a subprocess with one thread (``ddp_worker.py``).

Each rank trains on its half of every global batch through
``lm.distributed.ddp``; after 10 steps the parameters must equal
single-process eager training on the whole batch and be identical on both
ranks. The two ranks share one compiled-module cache directory.
"""
from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest
import torch

import lazy_mlir as lm

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import ddp_worker  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)
RUN_TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(tmp_path, mode: str, world: int = 2, timeout_s: float = RUN_TIMEOUT_S):
    """Start ``world`` ranks of ``ddp_worker.py MODE``; returns each rank's
    (return code, stderr, results or None) once all have exited. Every run
    of this file shares one module cache (the compiles are most of its time)."""
    port = _free_port()
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path,
               OMP_NUM_THREADS="1", LAZY_MLIR_CPU_THREADS="1")
    env.setdefault("LAZY_MLIR_CACHE_DIR", str(_CACHE_DIR[0]))
    procs, outs = [], []
    for rank in range(world):
        out = tmp_path / f"{mode}-{rank}.pt"
        outs.append(out)
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "ddp_worker.py"), str(rank), str(world), str(port), mode,
             str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    deadline = time.monotonic() + timeout_s
    for p, out in zip(procs, outs):
        try:
            _, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail(f"a rank of {mode!r} hung for {timeout_s} s")
        results.append((p.returncode, err, torch.load(out) if out.exists() else None))
    return results


_CACHE_DIR = [None]


@pytest.fixture(scope="module", autouse=True)
def _shared_cache(tmp_path_factory):
    _CACHE_DIR[0] = tmp_path_factory.mktemp("ddp-cache")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    ranks = _run_ranks(tmp, "train")
    for rc, err, r in ranks:
        assert rc == 0, err[-3000:]
        r["stderr"] = err
    return [r for _, _, r in ranks]


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_two_ranks_equal_eager_on_the_whole_batch(trained, opt_name):
    expected = ddp_worker.eager_reference(opt_name)
    rank0, rank1 = (r[opt_name]["params"] for r in trained)
    for a, b, e in zip(rank0, rank1, expected):
        assert torch.equal(a, b)  # identical on both ranks, bit for bit
        torch.testing.assert_close(a, e, **TOL)


def test_gradients_are_bucketed(trained):
    # 10 steps at bucket_mb=0.01 (10 KB): the net's 5 KB of conv and 18 KB
    # of linear gradients make 3 buckets a step (not one per parameter: 6).
    for r in trained:
        assert r["sgd"]["all_reduces"] == 10 * 3


def test_no_sync_control_diverges(trained):
    expected = ddp_worker.eager_reference("sgd")
    rank0, rank1 = (r["no_sync"]["params"] for r in trained)
    assert any((a - b).abs().max() > 1e-3 for a, b in zip(rank0, rank1))
    assert any((a - e).abs().max() > 1e-3 for a, e in zip(rank0, expected))


def test_compile_count_flat_after_warm_up(trained):
    for r in trained:
        for name in ("sgd", "adam", "no_sync"):
            compiles = r[name]["compiles"]
            assert compiles[ddp_worker.WARM_UP - 1] == compiles[-1], (name, compiles)


def test_compile_train_step_runs_plain_and_stays_in_sync(trained):
    expected = ddp_worker.eager_reference("sgd")
    r0, r1 = trained
    for r in trained:  # recorded (refused, with the reason logged) then plain steps
        assert r["refused"] >= 1 and r["plain_steps"] >= ddp_worker.STEPS - r["refused"]
        assert "a collective (all-reduce) runs on the host between two graphs" in r["stderr"]
    for a, b, e in zip(r0["step"]["params"], r1["step"]["params"], expected):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e, **TOL)


def test_collectives_on_lazy_tensors(trained):
    for rank, r in enumerate(trained):
        got = r["collectives"]
        torch.testing.assert_close(got["dist.all_reduce"], torch.arange(4.0) * 4 + 3)
        torch.testing.assert_close(got["dist.broadcast"], torch.full((3,), 6.0))
        torch.testing.assert_close(got["funcol.all_reduce"], torch.full((2,), 1.5))
        torch.testing.assert_close(got["all_gather"], torch.tensor([0.0, 0.0, 3.0, 3.0]))
        summed = torch.arange(4.0) * 2 + 1
        torch.testing.assert_close(got["reduce_scatter"], summed[2 * rank:2 * rank + 2])


# CI trains the first (cold compiles cost about a minute each); --runslow all three.
TORCH_DDP_RUNS = ["sgd-torch_view", "sgd-torch_copy", "adam-torch_view"]


@pytest.fixture(scope="module")
def torch_ddp(tmp_path_factory, request):
    runs = TORCH_DDP_RUNS if request.config.getoption("--runslow") else TORCH_DDP_RUNS[:1]
    ranks = _run_ranks(tmp_path_factory.mktemp("torch-ddp"), "torch_ddp=" + ",".join(runs),
                       timeout_s=900)
    for rc, err, _ in ranks:
        assert rc == 0, err[-3000:]
    return [r for _, _, r in ranks]


@pytest.mark.parametrize("run", [pytest.param(r, marks=() if i == 0 else pytest.mark.slow)
                                 for i, r in enumerate(TORCH_DDP_RUNS)])
def test_torch_ddp_equals_eager_on_the_whole_batch(torch_ddp, run):
    # torch.nn.parallel.DistributedDataParallel itself on the lazy device:
    # its C++ reducer's bucket views, copies and allreduce_ reach lazy tensors.
    expected = ddp_worker.eager_reference(run.split("-")[0])
    rank0, rank1 = (r[run]["params"] for r in torch_ddp)
    for a, b, e in zip(rank0, rank1, expected):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, e, **TOL)
    for r in torch_ddp:
        compiles = r[run]["compiles"]
        assert compiles[ddp_worker.WARM_UP - 1] == compiles[-1], (run, compiles)


def test_a_rank_that_raises_stops_the_other(tmp_path):
    t0 = time.monotonic()
    (rc0, err0, _), (rc1, err1, _) = _run_ranks(tmp_path, "raise")
    assert rc1 != 0 and "fails on purpose" in err1
    assert rc0 != 0
    assert "lazy-mlir: all_reduce across 2 ranks failed" in err0, err0[-2000:]
    assert time.monotonic() - t0 < RUN_TIMEOUT_S


def test_collectives_need_an_initialized_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        lm.distributed.all_reduce_([torch.ones(2, device="lazy")])
    with pytest.raises(TypeError, match="lazy device"):
        lm.distributed.all_reduce_([torch.ones(2)])


def test_buckets_by_dtype_and_size():
    ts = [torch.empty(1000), torch.empty(10, dtype=torch.float64), torch.empty(1000),
          torch.empty(5000), torch.empty(10)]
    assert lm.distributed.buckets(ts, bucket_bytes=8000) == [[0, 2], [1], [3], [4]]


@pytest.mark.skipif(torch.cuda.device_count() < 2 or not torch.distributed.is_nccl_available(),
                    reason="NCCL needs two CUDA GPUs; none here")
def test_nccl_all_reduce(tmp_path):  # pragma: no cover - needs two GPUs
    ranks = _run_ranks(tmp_path, "nccl")
    for rc, err, r in ranks:
        assert rc == 0, err[-3000:]
        torch.testing.assert_close(r["avg"], torch.arange(4.0) * 2 + 1)
