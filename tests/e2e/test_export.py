"""Ahead-of-time export: artifacts compared with eager PyTorch, run without torch.

The torch-free checks run the artifact in a subprocess whose ``import torch``
fails (a PYTHONPATH shim), loading the runner by file path, as a user of
``iree-base-runtime`` and numpy would.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.export import ArtifactError, SignatureError, load, read_params, save_params
from lazy_mlir.export.capture import ExportError
from lazy_mlir.export.train import export_train_step
from lazy_mlir.export.writer import export
from lazy_mlir.models.seed import LeNet5, digits

from e2e_helpers import train_steps

RUNNER = Path(__file__).resolve().parents[2] / "lazy_mlir" / "export" / "artifact.py"


def _lenet(seed=0):
    torch.manual_seed(seed)
    return LeNet5().eval()


def _eager(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def _x(batch=1, seed=1):
    return np.random.default_rng(seed).standard_normal((batch, 1, 28, 28)).astype(np.float32)


def _torchless(tmp_path: Path, *parts: str, args=()) -> subprocess.CompletedProcess:
    """Run the script made of ``parts`` (each dedented) with ``args`` where
    importing torch (or torch_mlir) raises ImportError."""
    shim = tmp_path / "shim"
    for name in ("torch", "torch_mlir"):
        (shim / name).mkdir(parents=True, exist_ok=True)
        (shim / name / "__init__.py").write_text(
            f"raise ImportError('{name} is blocked in this test')\n")
    code = tmp_path / "script.py"
    code.write_text("\n".join(textwrap.dedent(p) for p in parts))
    env = dict(os.environ, PYTHONPATH=str(shim))
    r = subprocess.run([sys.executable, str(code), *map(str, args)], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    return r


_LOAD_BY_PATH = """
    import importlib.util, sys
    import numpy as np
    def load_runner(path):
        spec = importlib.util.spec_from_file_location("artifact_runner", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
"""

_NO_TORCH_LOADED = """
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "torch_mlir",
                   "lazy_mlir") or m.startswith("iree.compiler"))
    assert not heavy, heavy
"""


@pytest.fixture(scope="module")
def lenet_external(tmp_path_factory):
    model = _lenet()
    path = export(model, torch.from_numpy(_x()), target="cpu",
                  path=tmp_path_factory.mktemp("art") / "lenet", params="external")
    return model, path


# -- forward export -------------------------------------------------------------

def test_embedded_artifact_matches_eager_and_has_a_manifest(tmp_path):
    model = _lenet()
    path = export(model, torch.from_numpy(_x()), target="cpu", path=tmp_path / "lenet")
    assert sorted(os.listdir(path)) == ["manifest.json", "module.vmfb", "run.py"]
    m = json.loads((path / "manifest.json").read_text())
    assert m["kind"] == "function" and m["entry"]["name"] == "forward"
    assert m["entry"]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 1, 28, 28]}]
    assert m["entry"]["outputs"] == [{"name": "output", "dtype": "float32", "shape": [1, 10]}]
    assert m["params"]["mode"] == "embed" and m["params"]["file"] is None
    assert m["params"]["bound"][0] == "conv1.weight"
    assert m["target"]["name"] == "cpu" and m["target"]["driver"] == "local-task"
    assert "--iree-hal-target-backends=llvm-cpu" in m["flags"]
    assert set(m["versions"]) >= {"torch", "torch-mlir", "iree-base-compiler",
                                  "iree-base-runtime"}
    assert len(m["cache_key"]) == 64
    digest = hashlib.sha256((path / "module.vmfb").read_bytes()).hexdigest()
    assert m["files"]["module.vmfb"]["sha256"] == digest
    fn = load(path)
    x = _x()
    np.testing.assert_allclose(fn(x), _eager(model, x), rtol=1e-5, atol=1e-6)


def test_external_params_run_without_torch(lenet_external, tmp_path):
    model, path = lenet_external
    assert (path / "params.irpa").is_file()
    x = _x(seed=3)
    np.save(tmp_path / "x.npy", x)
    _torchless(tmp_path, _LOAD_BY_PATH, """
        art, runner_path = sys.argv[1], sys.argv[2]
        x = np.load("x.npy")
        for source in (runner_path, art + "/run.py"):   # the package's and the artifact's copy
            runner = load_runner(source)
            y = runner.load(art)(x)
            np.save("y.npy", y)
    """, _NO_TORCH_LOADED, args=(path, RUNNER))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _eager(model, x),
                               rtol=1e-5, atol=1e-6)
    # The artifact's run.py also works as a script, on the directory holding it.
    r = subprocess.run([sys.executable, str(path / "run.py"), "--input", "x.npy", "--output",
                        "z.npy"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=str(tmp_path / "shim")))
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "z.npy"), _eager(model, x),
                               rtol=1e-5, atol=1e-6)


def test_weights_swap_without_recompiling(lenet_external, tmp_path):
    _, original = lenet_external
    path = tmp_path / "lenet"
    shutil.copytree(original, path)
    vmfb = (path / "module.vmfb").read_bytes()
    other = _lenet(seed=7)
    params = read_params(path)
    assert list(params) == [n for n, _ in other.named_parameters()]
    save_params(path, {n: p.detach().numpy() for n, p in other.named_parameters()})
    assert (path / "module.vmfb").read_bytes() == vmfb
    x = _x(batch=1, seed=4)
    np.testing.assert_allclose(load(path)(x), _eager(other, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ArtifactError, match="linear1.weight is float32\\[3\\]"):
        save_params(path, {**read_params(path), "linear1.weight": np.zeros(3, np.float32)})


def test_wrong_inputs_name_the_signature(lenet_external):
    fn = load(lenet_external[1])
    sig = "forward(x: float32[1,1,28,28]) -> (output: float32[1,10])"
    assert fn.signature == sig
    for bad in (_x(batch=2), _x().astype(np.float64), _x()[0]):
        with pytest.raises(SignatureError) as e:
            fn(bad)
        assert sig in str(e.value)
    with pytest.raises(SignatureError, match="pass numpy arrays"):
        fn(_x().tolist())
    with pytest.raises(SignatureError, match="expected 1 argument"):
        fn(_x(), _x())


def test_missing_or_corrupted_files_are_reported(lenet_external, tmp_path):
    def broken(name, how):
        path = tmp_path / f"{name}-{how}"
        shutil.copytree(lenet_external[1], path)
        f = path / name
        if how == "missing":
            f.unlink()
        elif how == "truncated":
            f.write_bytes(f.read_bytes()[:100])
        else:
            data = bytearray(f.read_bytes())
            data[len(data) // 2] ^= 0xFF
            f.write_bytes(bytes(data))
        return path

    for name in ("module.vmfb", "params.irpa"):
        with pytest.raises(ArtifactError, match=f"missing {name}"):
            load(broken(name, "missing"))
        with pytest.raises(ArtifactError, match=f"{name} is corrupted"):
            load(broken(name, "truncated"))
        with pytest.raises(ArtifactError, match=f"{name} is corrupted"):
            load(broken(name, "flipped"))
    bad = broken("manifest.json", "truncated")
    with pytest.raises(ArtifactError, match="not JSON"):
        load(bad)
    with pytest.raises(ArtifactError, match="no artifact directory"):
        load(tmp_path / "nowhere")
    # An archive that is not one, checked against the manifest without checksums.
    with pytest.raises(ArtifactError, match="not a readable parameter archive"):
        load(lenet_external[1], params=lenet_external[1] / "module.vmfb")


def test_dynamic_batch_runs_batch_1_and_7(tmp_path):
    model = _lenet()
    path = export(model, torch.from_numpy(_x()), path=tmp_path / "dyn", params="external",
                  dynamic_dims={"x": {0: "batch"}})
    fn = load(path)
    assert fn.signature == "forward(x: float32[batch,1,28,28]) -> (output: float32[batch,10])"
    for batch in (1, 7):
        x = _x(batch=batch, seed=batch)
        y = fn(x)
        assert y.shape == (batch, 10)
        np.testing.assert_allclose(y, _eager(model, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(SignatureError, match="batch"):
        fn(np.zeros((2, 1, 27, 28), np.float32))


def test_function_with_several_inputs_and_outputs(tmp_path):
    def affine(x, w, b):
        y = x @ w + b
        return {"y": y, "norm": (y * y).sum(dim=1)}

    args = (torch.randn(4, 3), torch.randn(3, 5), torch.randn(5))
    path = export(affine, args, path=tmp_path / "fn",
                  dynamic_dims={"x": {0: ("n", 1, 16)}})
    fn = load(path)
    assert fn.signature == ("affine(x: float32[n,3], w: float32[3,5], b: float32[5]) -> "
                            "(y: float32[n,5], norm: float32[n]) where 1 <= n <= 16")
    with pytest.raises(SignatureError, match="1 <= n <= 16"):
        fn(np.zeros((17, 3), np.float32), args[1].numpy(), args[2].numpy())
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    out = fn(x, args[1].numpy(), args[2].numpy())
    ref = affine(torch.from_numpy(x), *args[1:])
    assert set(out) == {"y", "norm"}
    np.testing.assert_allclose(out["y"], ref["y"].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["norm"], ref["norm"].numpy(), rtol=1e-5, atol=1e-5)


def test_host_reads_are_refused(tmp_path):
    def branchy(x):
        return x * 2 if x.sum() > 0 else x

    with pytest.raises(ExportError, match="reads tensor values on the host"):
        export(branchy, torch.ones(3), path=tmp_path / "b")
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


# -- train step -------------------------------------------------------------------

def _nll(out, y):
    return F.nll_loss(F.log_softmax(out, dim=1), y)


def _batches(n, batch):
    x, y = digits()[:2]
    return [(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]) for i in range(n)]


def _train(device, batches):
    torch.manual_seed(0)
    model = LeNet5().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    return train_steps(model, opt, batches, device, _nll)


def test_lenet_train_step_trains_without_torch(tmp_path):
    steps, batch = 20, 16
    batches = _batches(steps, batch)
    torch.manual_seed(0)
    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    path = export_train_step(model, _nll, opt, batches[0], path=tmp_path / "train")
    assert model.conv1.weight.grad is None  # the model and optimizer were not touched
    m = json.loads((path / "manifest.json").read_text())
    assert m["kind"] == "train_step" and m["entry"]["name"] == "train_step"
    assert m["entry"]["state"][0] == "conv1.weight"
    assert [i["name"] for i in m["entry"]["inputs"][-2:]] == ["x", "target"]
    assert m["entry"]["outputs"][-1] == {"name": "loss", "dtype": "float32", "shape": []}
    np.savez(tmp_path / "data.npz", x=np.stack([b[0].numpy() for b in batches]),
             y=np.stack([b[1].numpy() for b in batches]))
    _torchless(tmp_path, _LOAD_BY_PATH, """
        runner = load_runner(sys.argv[2])
        step = runner.load(sys.argv[1])
        data = np.load("data.npz")
        losses = [step.step(x, y) for x, y in zip(data["x"], data["y"])]
        np.save("losses.npy", np.array(losses))
        np.savez("state.npz", **step.state)
        # The pure form gives the same first step from the initial state.
        new_state, loss = step(step.initial_state(), data["x"][0], data["y"][0])
        assert abs(float(loss) - losses[0]) <= 1e-6 * abs(losses[0]), (loss, losses[0])
    """, _NO_TORCH_LOADED, args=(path, RUNNER))
    artifact = np.load(tmp_path / "losses.npy")
    lazy = np.array(_train("lazy", batches))
    eager = np.array(_train("cpu", batches))
    np.testing.assert_allclose(artifact, lazy, rtol=1e-4)
    np.testing.assert_allclose(artifact, eager, rtol=1e-4)
    assert artifact[-1] != artifact[0]


def test_optimizer_whose_first_step_makes_state_is_refused(tmp_path):
    torch.manual_seed(0)
    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with pytest.raises(ExportError, match="momentum_buffer"):
        export_train_step(model, _nll, opt, _batches(1, 4)[0], path=tmp_path / "m")


# -- command line -------------------------------------------------------------------

def _cli(*argv) -> int:
    """``lazy-mlir ARGV`` in this process."""
    from lazy_mlir.tools import cli
    return cli.main(list(argv))


def test_cli_export_and_run(tmp_path, capsys):
    out = tmp_path / "lenet"
    assert _cli("export", "lazy_mlir.models.seed:LeNet5", "--example",
                "float32[1,1,28,28]", "--target", "cpu", "-o", str(out)) == 0
    assert "forward(x: float32[1,1,28,28])" in capsys.readouterr().out
    x = _x(seed=5)
    np.save(tmp_path / "x.npy", x)
    assert _cli("run", str(out), "--input", str(tmp_path / "x.npy"), "--output",
                str(tmp_path / "y.npy")) == 0
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), _eager(_lenet(), x),
                               rtol=1e-5, atol=1e-6)
    capsys.readouterr()
    cases = [
        (2, ["export", "no_such_module:f", "--example", "float32[1]", "-o", str(tmp_path / "a")],
         "cannot import"),
        (2, ["export", "lazy_mlir.models.seed:LeNet5", "--example", "float32[1,2",
             "-o", str(tmp_path / "a")], "expected dtype[d0,d1,...]"),
        (2, ["export", "lazy_mlir.models.seed:Nope", "--example", "float32[1]",
             "-o", str(tmp_path / "a")], "has no attribute"),
        (1, ["run", str(tmp_path / "nowhere"), "--input", str(tmp_path / "x.npy")],
         "no artifact directory"),
        (1, ["run", str(out), "--input", str(tmp_path / "missing.npy")], "no such input"),
    ]
    for code, argv, message in cases:
        assert _cli(*argv) == code, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    np.save(tmp_path / "x64.npy", x.astype(np.float64))
    assert _cli("run", str(out), "--input", str(tmp_path / "x64.npy")) == 1
    assert "expected x: float32[1,1,28,28]" in capsys.readouterr().err


# -- targets ------------------------------------------------------------------

def test_cuda_export_compiles_without_a_gpu(tmp_path):
    from lazy_mlir.targets import TARGETS
    if "cuda" not in TARGETS:
        pytest.skip("no cuda target in the targets table")
    path = export(_lenet(), torch.from_numpy(_x()), target="cuda:sm_80",
                  path=tmp_path / "cuda", params="external")
    m = json.loads((path / "manifest.json").read_text())
    assert m["target"]["name"] == "cuda" and m["target"]["driver"] == "cuda"
    assert "--iree-hal-target-backends=cuda" in m["flags"]
    assert "--iree-cuda-target=sm_80" in m["flags"]
    assert (path / "module.vmfb").stat().st_size > 0


def test_vulkan_artifact_runs_when_a_device_exists(tmp_path):
    from lazy_mlir.targets import driver_devices
    devices, why = driver_devices("vulkan")
    if not devices:
        pytest.skip(f"no Vulkan device ({why or 'none found'})")
    model = _lenet()
    path = export(model, torch.from_numpy(_x()), target="vulkan", path=tmp_path / "vk",
                  params="external")
    fn = load(path)
    assert fn.driver == "vulkan"
    x = _x(seed=9)
    np.testing.assert_allclose(fn(x), _eager(model, x), rtol=1e-4, atol=1e-5)
