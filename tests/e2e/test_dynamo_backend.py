"""``torch.compile(model, backend="lazy_mlir")`` against eager PyTorch.

Each test trains (or runs) a model twice from the same weights, once eagerly
and once through ``torch.compile`` with the lazy_mlir backend, and compares
losses, parameters and buffers step by step. After warm-up,
``torch._dynamo.config.error_on_recompile`` turns any recompile into an
error. Graphs are small: every one is a real IREE compile. The real-model
suite runs one model in CI, the rest with ``-m slow``.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.frontends import dynamo
from lazy_mlir.models.real import MODEL_NAMES, real_model
from lazy_mlir.models.seed import LeNet5, MnistCNN, digits

TOL = dict(rtol=1e-4, atol=1e-5)
X, Y = (t[:96] for t in digits()[:2])
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.register()  # a checkout whose installed metadata lacks the entry point
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _count(name: str) -> int:
    return lm.metrics.counter_value(name)


def _train_both(make, steps, batches, *, fullgraph=True, opt=None, check=None, warmup=2):
    """Train ``make()`` eagerly and compiled for ``steps`` steps on
    ``batches(i) -> (x, y)``; compare every loss, then return both models."""
    eager = make()
    model = copy.deepcopy(eager)
    opt = opt or (lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9))
    eopt, copt = opt(eager.parameters()), opt(model.parameters())
    compiled = torch.compile(model, backend="lazy_mlir", fullgraph=fullgraph)
    eager_graphs = _count("DynamoEagerGraph")
    for i in range(steps):
        x, y = batches(i)
        with torch._dynamo.config.patch(error_on_recompile=i >= warmup):
            for m, o in ((eager, eopt), (compiled, copt)):
                o.zero_grad(set_to_none=True)
                loss = F.cross_entropy(m(x), y)
                loss.backward()
                o.step()
                if m is eager:
                    want = loss.detach()
            torch.testing.assert_close(loss.detach(), want, **TOL, msg=f"loss at step {i}")
        if check:
            check(eager, model)
    assert _count("DynamoEagerGraph") == eager_graphs  # every graph compiled
    return eager, model


def _digits(batch):
    return lambda i: (X[(i * batch) % 64:(i * batch) % 64 + batch],
                      Y[(i * batch) % 64:(i * batch) % 64 + batch])


def _assert_same_state(eager, model, **tol):
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(b, a, **(tol or TOL), msg=name)


def test_lenet5_trains_like_eager_and_a_smaller_last_batch_recompiles_once():
    before = _count("DynamoGraph")
    eager, model = _train_both(lambda: (torch.manual_seed(0), LeNet5())[1], 10, _digits(8))
    assert _count("DynamoGraph") - before == 1  # one graph, no recompile in 10 steps
    _assert_same_state(eager, model)
    # A smaller last batch: exactly one recompile, then none again.
    compiled = torch.compile(model, backend="lazy_mlir", fullgraph=True)
    x, y = X[:5], Y[:5]
    for _ in range(2):
        F.cross_entropy(compiled(x), y).backward()
    assert _count("DynamoGraph") - before == 2
    torch.testing.assert_close(compiled(x), eager(x), **TOL)


@pytest.mark.slow  # its 9216x128 layer makes a slow cold compile; LeNet-5 covers convs in CI
def test_mnist_cnn_trains_like_eager():
    eager, model = _train_both(lambda: (torch.manual_seed(0), MnistCNN(dropout=False))[1], 10,
                               _digits(4), check=_assert_same_state)


class _ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, bias=False)  # a bias before batch norm has no gradient
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


def test_batch_norm_running_statistics_match_eager():
    # Batch statistics amplify float rounding a little more than the other models.
    check = lambda e, m: _assert_same_state(e, m, rtol=1e-3, atol=1e-4)  # noqa: E731
    eager, model = _train_both(lambda: (torch.manual_seed(0), _ConvBN())[1], 10, _digits(8),
                               check=check)
    assert model.bn.num_batches_tracked.item() == 10
    eager.eval()
    model.eval()
    compiled = torch.compile(model, backend="lazy_mlir", fullgraph=True)
    with torch.no_grad():  # the inference graph reads the running statistics
        torch.testing.assert_close(compiled(X[:8]), model(X[:8]), **TOL)


def test_compiled_optimizer_step_matches_eager():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(16, 8), nn.Tanh(), nn.Linear(8, 4))
    model = copy.deepcopy(eager)
    make = lambda ps: torch.optim.Adam(ps, lr=1e-2)  # noqa: E731
    eopt, copt = make(eager.parameters()), make(model.parameters())
    step = torch.compile(copt.step, backend="lazy_mlir")
    before, eager_before = _count("DynamoGraph"), _count("DynamoEagerGraph")
    x, y = torch.randn(6, 16), torch.randn(6, 4)
    for _ in range(4):
        for m, o, s in ((eager, eopt, eopt.step), (model, copt, step)):
            o.zero_grad()
            F.mse_loss(m(x), y).backward()
            s()
    assert _count("DynamoGraph") > before  # the update went through the backend
    assert _count("DynamoEagerGraph") == eager_before  # compiled (prims.fma included)
    _assert_same_state(eager, model)
    for a, b in zip(eopt.state.values(), copt.state.values()):
        torch.testing.assert_close(b["exp_avg_sq"], a["exp_avg_sq"], **TOL)


def test_dynamic_shapes_are_specialized_per_signature():
    fn = torch.compile(lambda a, b: (a @ b).relu().sum(0), backend="lazy_mlir", dynamic=True)
    before = _count("DynamoSpecialize")
    for n in (3, 5, 3):
        a, b = torch.randn(n, 4), torch.randn(4, 2)
        torch.testing.assert_close(fn(a, b), (a @ b).relu().sum(0), **TOL)
    assert _count("DynamoSpecialize") - before == 2


def test_a_graph_that_fails_to_compile_runs_eagerly_counted(caplog):
    bad = {"linalg_after": ["no-such-pass"]}
    fn = torch.compile(lambda a: torch.sin(a) * 3, backend="lazy_mlir",
                       options={"config": bad})
    before = _count("DynamoEagerGraph")
    a = torch.randn(7)
    with caplog.at_level("WARNING", logger="lazy_mlir"):
        torch.testing.assert_close(fn(a), torch.sin(a) * 3)
        torch.testing.assert_close(fn(a), torch.sin(a) * 3)
    assert _count("DynamoEagerGraph") - before == 2
    assert "runs eagerly" in caplog.text and "repro" in caplog.text


def test_bad_options_say_what_is_valid():
    with pytest.raises(Exception, match="unknown option.*valid: target, config"):
        torch.compile(lambda a: a + 1, backend="lazy_mlir", options={"targte": "cpu"})(
            torch.ones(2))
    with pytest.raises(Exception, match="unknown target"):
        torch.compile(lambda a: a + 1, backend="lazy_mlir", options={"target": "tpu"})(
            torch.ones(2))


def test_dump_dir_gets_every_stage(tmp_path):
    from lazy_mlir.pipeline import dump
    saved = list(dump._active)
    dump.set_dumper(dump.Dumper(tmp_path))
    try:
        fn = torch.compile(lambda a: (a * 2).exp(), backend="lazy_mlir")
        a = torch.randn(3, 5)
        torch.testing.assert_close(fn(a), (a * 2).exp())
    finally:
        dump._active[:] = saved
    names = {p.name for p in tmp_path.iterdir()}
    assert {"0000-fx.txt", "0000-torch.mlir", "0000-linalg.mlir", "0000.vmfb"} <= names
    graphs = json.loads((tmp_path / "manifest.json").read_text())["graphs"]
    assert graphs[0]["graph_key"].startswith("dynamo:")


SCRIPT = textwrap.dedent("""
    import json, torch, torch.nn.functional as F
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    compiled = torch.compile(model, backend="lazy_mlir", fullgraph=True)  # no lazy_mlir import
    x, y = torch.randn(4, 12), torch.tensor([0, 1, 2, 1])
    loss = F.cross_entropy(compiled(x), y); loss.backward()
    import lazy_mlir as lm
    names = ["UncachedCompile", "PersistentCacheHit", "DynamoGraph"]
    print(json.dumps({"loss": loss.item(), "grad": model[0].weight.grad.sum().item(),
                      **{n: lm.metrics.counter_value(n) for n in names}}))
""")


def _run_with_entry_point(tmp_path, cache_dir):
    """``SCRIPT`` in a fresh process that finds the backend through the
    ``torch_dynamo_backends`` entry point of a distribution on its path."""
    dist = tmp_path / "ep" / "lazy_mlir_entry_point-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lazy-mlir-entry-point\n"
                                   "Version: 0\n")
    (dist / "entry_points.txt").write_text(
        "[torch_dynamo_backends]\nlazy_mlir = lazy_mlir.frontends.dynamo:lazy_mlir_backend\n")
    env = dict(os.environ, LAZY_MLIR_CACHE_DIR=str(cache_dir),
               PYTHONPATH=os.pathsep.join([str(dist.parent), str(ROOT)]))
    env.pop("LAZY_MLIR_DUMP_DIR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_entry_point_and_a_second_process_compiles_nothing(tmp_path):
    first = _run_with_entry_point(tmp_path, tmp_path / "cache")
    second = _run_with_entry_point(tmp_path, tmp_path / "cache")
    assert first["DynamoGraph"] == 1 and first["UncachedCompile"] == 2  # forward, backward
    assert second["UncachedCompile"] == 0 and second["PersistentCacheHit"] == 2
    assert second["loss"] == first["loss"] and second["grad"] == first["grad"]


def test_pyproject_declares_the_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert ('[project.entry-points.torch_dynamo_backends]\n'
            'lazy_mlir = "lazy_mlir.frontends.dynamo:lazy_mlir_backend"') in text


# Models Dynamo cannot take whole: transformers' loss logs a warning once
# (a graph break), and Dynamo does not trace nn.LSTM (it runs eagerly).
GRAPH_BREAKS = {"gpt2", "lstm"}


def _train_real(rm, steps=10, warmup=2):
    eager = rm.make()
    model = copy.deepcopy(eager)
    eopt, copt = rm.optimizer(eager), rm.optimizer(model)
    compiled = torch.compile(model, backend="lazy_mlir", fullgraph=rm.name not in GRAPH_BREAKS)
    eager_graphs = _count("DynamoEagerGraph")
    for i in range(steps):
        batch = rm.batch(i)
        with torch._dynamo.config.patch(error_on_recompile=i >= warmup):
            losses = []
            for m, run, o in ((eager, eager, eopt), (model, compiled, copt)):
                o.zero_grad(set_to_none=True)
                loss = rm.loss(run, batch)
                loss.backward()
                o.step()
                losses.append(loss.detach())
        torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-4,
                                   msg=f"{rm.id} loss at step {i}")
    assert _count("DynamoEagerGraph") == eager_graphs  # every graph compiled
    # AdamW turns rounding-sized gradient differences into steps of up to lr.
    for (name, a), b in zip(eager.state_dict().items(), model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=5e-4, msg=f"{rm.id} {name}")


CI_MODEL = "transformer"


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == CI_MODEL else
                                               pytest.mark.slow) for n in MODEL_NAMES])
def test_real_model_trains_like_eager(name):
    _train_real(real_model(name, "tiny"))


def test_vulkan_target_trains_like_eager(vulkan_session):
    """``options={"target": "vulkan"}`` (lavapipe in CI); skipped without a device."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="lazy_mlir", options={"target": "vulkan"})
    x, y = torch.randn(4, 12), torch.tensor([0, 1, 2, 1])
    for m in (eager, compiled):
        F.cross_entropy(m(x), y).backward()
    for a, b in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(b.grad, a.grad, **TOL)
