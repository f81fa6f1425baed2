"""Large f32 matmuls of cpu modules run by torch.mm (host_calls/passes/blas.py,
host_calls/runtime/blas.py): a model whose matmuls are above the threshold trains
as eager does, with the calls and without them (``LAZY_MLIR_BLAS=0``)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lazy_mlir as lm
from lazy_mlir import metrics
from lazy_mlir.host_calls.passes.blas import MIN_MACS

from e2e_helpers import train_steps

WIDTH, BATCH = 512, 128  # 128x512x512 = 33.5 M multiply-adds per matmul


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.GELU(), nn.Linear(WIDTH, WIDTH))


def _train(device: str, steps: int = 3) -> list[float]:
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g))
               for _ in range(steps)]
    return train_steps(model, opt, batches, device, lambda out, y: ((out - y) ** 2).mean())


@pytest.mark.parametrize("blas", ["1", "0"])
def test_training_matches_eager_with_and_without_calls(monkeypatch, blas):
    assert BATCH * WIDTH * WIDTH >= MIN_MACS  # (the premise: every matmul is called)
    monkeypatch.setenv("LAZY_MLIR_BLAS", blas)
    before = metrics.counter_value("HostBlasCall")
    lazy = _train("lazy")
    eager = _train("cpu")
    torch.testing.assert_close(torch.tensor(lazy), torch.tensor(eager), rtol=1e-5, atol=1e-6)
    calls = metrics.counter_value("HostBlasCall") - before
    if blas == "1":  # forward 2, input gradient 1, weight gradients 2 per step
        assert calls >= 5 * 3
    else:
        assert calls == 0


def test_an_export_artifact_never_imports_torch_mm(tmp_path, monkeypatch):
    """Export compiles with the config as given: no call, whatever the env."""
    monkeypatch.setenv("LAZY_MLIR_BLAS", "1")
    from lazy_mlir.config import PipelineConfig
    from lazy_mlir.host_calls.runtime.blas import imports_blas
    from lazy_mlir.host_calls.runtime.switches import session_config
    from lazy_mlir.targets import get_target
    cpu = get_target("cpu")
    assert session_config(cpu, PipelineConfig()).host_blas
    assert not PipelineConfig().host_blas
    path = lm.export(_model().eval(), torch.randn(BATCH, WIDTH), target="cpu",
                     path=tmp_path / "mlp", config=PipelineConfig(host_blas=True))
    vmfb = b"".join(p.read_bytes() for p in path.rglob("*.vmfb"))
    assert vmfb and not imports_blas(vmfb)
    assert b"lazy_mlir_blas" not in b"".join(p.read_bytes() for p in path.rglob("*.mlir"))


def _train_bf16(device: str, steps: int = 3) -> tuple[list[float], list[torch.Tensor]]:
    model = _model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)
        opt.zero_grad(set_to_none=True)
        region = lm.autocast("lazy") if device == "lazy" else torch.autocast("cpu")
        with region:  # bf16 by default, as torch.autocast("cpu")
            loss = ((model(x.to(device)) - y.to(device)) ** 2).mean()
        loss.backward()
        opt.step()
        if device == "lazy":
            lm.mark_step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_bf16_autocast_matmuls_are_called_and_train_as_eager(monkeypatch):
    """Under bf16 autocast the module's matmuls take bf16 operands (the
    forward's ``addmm`` as float32 of widened ones): they are called too, and
    the calls compute eager's bf16 products."""
    monkeypatch.setenv("LAZY_MLIR_BLAS", "1")
    before = metrics.counter_value("HostBlasCall")
    lazy = _train_bf16("lazy")
    calls = metrics.counter_value("HostBlasCall") - before
    eager = _train_bf16("cpu")
    torch.testing.assert_close(torch.tensor(lazy[0]), torch.tensor(eager[0]), rtol=1e-2, atol=1e-3)
    for p_lazy, p_eager in zip(lazy[1], eager[1]):
        torch.testing.assert_close(p_lazy, p_eager, rtol=1e-2, atol=2e-3)
    assert calls >= 5 * 3
