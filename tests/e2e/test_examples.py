"""The example scripts (examples/word_language_model.py, image_classifier.py,
finetune_autocast.py) run a few steps on ``cpu`` and on ``lazy`` with the same
seed and print the same losses.

Each script is imported and its ``main(argv)`` called in this process (the
suite's conftest sets ``LAZY_MLIR_COMPILE=wait``, in-process compiles, a fresh
cache); the printed ``loss <float>`` figures are compared.

Dropout is 0 in these runs: the lazy device draws dropout's mask in the graph
from a seed taken from the CPU generator (lazy/random.py), so a lazy run is
reproducible but its masks are not eager CPU's (README's "Random numbers"
line in Behaviour says otherwise; reported). Sizes are tiny: every new slice
offset of the batchified corpus (``get_batch``) is a new graph (the offset is
a constant of the graph), so each step of the word LM's first epoch compiles.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

import lazy_mlir as lm

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LOSS = re.compile(r"\bloss\s+(-?\d+\.\d+)", re.IGNORECASE)


def _module(name):
    """examples/<name>.py as the module ``name`` (registered, so that a
    pickled class of it, torch.save(model), loads back)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def _run(capsys, name, device, argv):
    result = _module(name).main(["--device", device, *argv])
    out = capsys.readouterr().out
    losses = [float(x) for x in LOSS.findall(out)]
    assert losses, out
    return result, losses, out


def _both(capsys, name, argv):
    _, cpu, cpu_out = _run(capsys, name, "cpu", argv)
    lm.metrics.reset()
    _, lazy, lazy_out = _run(capsys, name, "lazy", argv)
    assert len(cpu) == len(lazy), (cpu_out, lazy_out)
    return cpu, lazy, lazy_out


WLM = ["--steps", "2", "--log-interval", "1", "--eval-steps", "1", "--bptt", "6",
       "--batch_size", "4", "--emsize", "16", "--nhid", "16", "--dropout", "0", "--lr", "2"]


@pytest.mark.parametrize("epochs", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_word_language_model_lstm(capsys, tmp_path, epochs):
    # One step an epoch (each graph compiles in ~30 s on a loaded 2-core
    # machine); --runslow adds a second epoch (lr annealing when the
    # validation loss rises). torch.save(model) of the best, torch.load of it.
    argv = WLM + ["--steps", "1", "--epochs", str(epochs), "--save", str(tmp_path / "model.pt")]
    cpu, lazy, out = _both(capsys, "word_language_model", argv)
    # a training and a validation loss an epoch, the test loss of the reloaded model
    assert len(lazy) == 2 * epochs + 1, out
    torch.testing.assert_close(torch.tensor(lazy), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # ~60 s of compiles here
def test_word_language_model_transformer(capsys, tmp_path):
    argv = WLM + ["--model", "Transformer", "--epochs", "1", "--steps", "1",
                  "--save", str(tmp_path / "model.pt")]
    cpu, lazy, _ = _both(capsys, "word_language_model", argv)
    torch.testing.assert_close(torch.tensor(lazy), torch.tensor(cpu), rtol=1e-4, atol=1e-5)


def test_image_classifier_resume(capsys, tmp_path):
    """An epoch, then a second resumed from the checkpoint (model, SGD
    momentum buffers, StepLR) on each device."""
    common = ["--steps", "1", "--print-freq", "1", "--dropout", "0", "--lr-step", "1"]
    runs = {}
    for device in ("cpu", "lazy"):
        ckpt = tmp_path / device
        _, first, _ = _run(capsys, "image_classifier", device,
                           common + ["--epochs", "1", "--checkpoint-dir", str(ckpt)])
        _, resumed, out = _run(capsys, "image_classifier", device,
                               common + ["--epochs", "2", "--checkpoint-dir", str(ckpt),
                                         "--resume", str(ckpt / "checkpoint.pth.tar")])
        assert "=> loaded checkpoint" in out and "epochs 1..2" in out, out
        assert "lr 0.000500" in out, out  # StepLR's state came back: one decay before, one now
        runs[device] = first + resumed
    torch.testing.assert_close(torch.tensor(runs["lazy"]), torch.tensor(runs["cpu"]),
                               rtol=1e-4, atol=1e-5)


def test_finetune_autocast(capsys):
    # bfloat16 autocast: the compiled graph rounds as eager does op by op
    # only where both keep the same bf16 intermediates; the matmul's
    # accumulation order and fusion differ, so the tolerance is bf16's (2^-8).
    argv = ["--steps", "2", "--log-interval", "1", "--dropout", "0", "--eval-size", "64",
            "--layers", "1", "--hidden-size", "32"]
    cpu, lazy, _ = _both(capsys, "finetune_autocast", argv)
    torch.testing.assert_close(torch.tensor(lazy), torch.tensor(cpu), rtol=1e-2, atol=1e-2)
    # Known bug: at the script's default size (2 layers, hidden 64) the
    # training step's module fails to load in IREE ("Error registering
    # modules: ...hal/module.c:1106: OUT_OF_RANGE", counted ModuleLoadFailed)
    # and runs eagerly op by op (same losses). Here it must compile and load.
    assert lm.metrics.counter_value("ModuleLoadFailed") == 0
