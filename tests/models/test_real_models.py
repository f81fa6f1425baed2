"""The real-model suite trained on the lazy device, compared with eager PyTorch.

Every model of ``lazy_mlir.models.real`` trains a few steps from the
same weights and batches in eager PyTorch and on the lazy device, by the two
paths a user has: the plain loop (device + ``mark_step()``) and
``lm.compile_train_step`` (replayed as one compiled graph). Each test checks
the losses against eager's, that no op ran eagerly (no ``aten::`` counter),
and that nothing compiles after the warm-up steps (a recompile every step is
the failure the suite exists to catch).

CI runs one model each way at the tiny size, one layer deep (see
``PLAIN_IN_CI``); the rest, the two-layer tiny models and the medium size,
are ``slow`` (``--runslow``).
"""
from __future__ import annotations

import functools
import os

import pytest
import torch

import lazy_mlir as lm
from lazy_mlir.models.real import MODEL_NAMES, real_model

pytest.importorskip("transformers")

STEPS = 5
# Eager AdamW keeps its bias corrections in Python floats, the lazy one
# (capturable=True) in float32 tensors: the updates differ by rounding.
TOL = dict(rtol=2e-4, atol=2e-5)
# CI runs two tests, one layer deep (a cold compile of the two-layer tiny
# model costs about 2 CPU-minutes a test, most of it in iree-compile):
# GPT-2's plain loop (a transformers decoder) and ResNet's replayed step
# (convolutions, batch norm buffers, a model's own loss from a keyword batch).
# --runslow runs every model both ways at both sizes, as the suite builds them.
PLAIN_IN_CI = ("gpt2",)
REPLAYED_IN_CI = ("resnet",)
CI_DIMS = (("layers", 1),)


def _params(names, ci, size="tiny"):
    out = []
    for n in names:
        if n in ci and size == "tiny":
            out.append(pytest.param(n, size, CI_DIMS, id=f"{n}-{size}-1layer"))
        out.append(pytest.param(n, size, (), id=f"{n}-{size}", marks=pytest.mark.slow))
    return out


@functools.lru_cache(maxsize=None)
def _eager_losses(name: str, size: str, dims: tuple, steps: int) -> tuple[float, ...]:
    rm = real_model(name, size, **dict(dims))
    model = rm.make()
    opt = rm.optimizer(model)
    losses = []
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = rm.loss(model, rm.batch(i))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return tuple(losses)


def _counters() -> dict[str, int]:
    return {n: lm.metrics.counter_value(n) for n in lm.metrics.counter_names()}


def _new(before: dict, prefix: str) -> dict[str, int]:
    now = _counters()
    return {n: v - before.get(n, 0) for n, v in now.items()
            if n.startswith(prefix) and v != before.get(n, 0)}


def _modules_made(before: dict) -> int:
    """Modules compiled or loaded from disk since ``before`` (the in-memory
    hits, ``CachedCompile``, are the reuse that must follow the warm-up)."""
    now = _counters()
    return sum(now.get(n, 0) - before.get(n, 0) for n in ("UncachedCompile", "PersistentCacheHit"))


def _check(rm, dims, losses, made, before, warmup):
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(_eager_losses(
        rm.name, rm.size.split(",")[0], dims, len(losses))), **TOL)
    assert _new(before, "aten::") == {}, "ops ran eagerly"
    # step 1 creates AdamW's state, so step 2's graph differs; from then on, none
    assert made[warmup - 1:] == [made[warmup - 1]] * (len(made) - warmup + 1), made


@pytest.mark.parametrize("name,size,dims", _params(MODEL_NAMES, PLAIN_IN_CI)
                         + _params(MODEL_NAMES, (), "medium"))
def test_plain_loop_matches_eager(name, size, dims):
    rm = real_model(name, size, **dict(dims))
    before = _counters()
    losses, made = _plain_loop(rm)
    _check(rm, dims, losses, made, before, warmup=2)


def test_plain_loop_split_at_the_loss_matches_eager(monkeypatch):
    """The loss read after ``mark_step`` from a graph of its own, the rest
    behind it (``lazy/early_outputs.py``), forced: step 2's read makes step
    3 decide to cut the steps after it before their backward; step 4's two
    graphs compile, and from then on none."""
    from lazy_mlir.lazy import early_outputs
    from lazy_mlir.lazy.state import backward_cuts, early_reads, split_plans
    monkeypatch.setattr(early_outputs, "pays", lambda seconds, capture_seconds: True)
    monkeypatch.delenv("LAZY_MLIR_SPLIT", raising=False)
    early_reads.clear()  # (nothing learned from the same graph in another test)
    split_plans.clear()
    backward_cuts.clear()
    dims = CI_DIMS
    rm = real_model("gpt2", "tiny", **dict(dims))
    before = _counters()
    losses, made = _plain_loop(rm, STEPS + 1)
    assert _new(before, "Split") == {"SplitAtBackward": 1, "SplitLaunch": STEPS - 2}
    _check(rm, dims, losses, made, before, warmup=4)


def _plain_loop(rm, steps: int = STEPS) -> tuple[list[float], list[int]]:
    """The README's loop: the losses, and the modules made by the end of
    each step."""
    model = rm.make().to("lazy")
    opt = rm.optimizer(model)
    before = _counters()
    losses, made = [], []
    for i in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = rm.loss(model, rm.batch(i, "lazy"))
        loss.backward()
        opt.step()
        lm.mark_step()
        losses.append(loss.item())
        made.append(_modules_made(before))
    return losses, made


@pytest.mark.parametrize("name,size,dims", _params(MODEL_NAMES, REPLAYED_IN_CI)
                         + _params(MODEL_NAMES, (), "medium"))
def test_compile_train_step_replays_and_matches_eager(name, size, dims):
    """Keyword batches (``step(**batch)``); the transformers models compute
    their own loss (no ``loss_fn``), the torch.nn ones get one."""
    rm = real_model(name, size, **dict(dims))
    model = rm.make().to("lazy")
    opt = rm.optimizer(model)
    step = (lm.compile_train_step(model, opt) if rm.computes_own_loss
            else lm.compile_train_step(model, rm.loss_fn, opt))
    before = _counters()
    losses, made = [], []
    for i in range(STEPS):
        losses.append(step(**rm.batch(i, "lazy")).item())
        made.append(_modules_made(before))
    # 1 records (and makes AdamW's state), 2 and 3 record the same graph, 4 and 5 replay
    assert _new(before, "TrainStep") == {"TrainStepRecorded": 3, "TrainStepReplayed": 2}
    _check(rm, dims, losses, made, before, warmup=2)


def test_dimensions_override_one_size():
    """``real_model(name, size, layers=1)``: the same model one layer deep
    (CI's quick Vulkan sample), named by its size; an unknown one is refused."""
    full, one = real_model("transformer", "tiny"), real_model("transformer", "tiny", layers=1)
    assert one.id == "transformer-tiny,layers=1"
    assert len(one.make().encoder.layers) == 1 and len(full.make().encoder.layers) == 2
    assert torch.equal(one.batch(0)["input_ids"], full.batch(0)["input_ids"])
    with pytest.raises(ValueError, match="unknown dimension depth"):
        real_model("gpt2", "tiny", depth=1)


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="Linux /proc")
def test_replayed_gpt2_medium_holds_its_memory():
    """A steady ``compile_train_step`` loop keeps its resident memory flat.
    GPT-2 medium's step module with host calls into PyTorch's matmuls and
    flash attention (``host_gemm``: on by default with MKL on Intel) grew
    ~190 MB a step while IREE's local-task workers ran it; it runs on the
    session's local-sync device now (``Session._config_for_calls``)."""
    rm = real_model("gpt2", "medium")
    model = rm.make().to("lazy")
    step = lm.compile_train_step(model, rm.optimizer(model))
    batches = [rm.batch(i, "lazy") for i in range(2)]
    for i in range(14):
        if i == 8:
            before = _resident_mb()
        step(**batches[i % 2]).item()
    assert _resident_mb() - before < 64  # six steps: a leak of ~190 MB a step shows
