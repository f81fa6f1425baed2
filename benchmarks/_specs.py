"""The benchmarks' rows and models, shared by the driver, the worker and the
report: the backends and model names, ``Spec`` (a row to run), the seed
models and their optimizers and losses (``build``), the inputs every backend
loads (``make_inputs``), ``Row`` (a row's result), and ``zoo_module``, which
loads the model zoos (``lazy_mlir/models/``) by path without importing lazy_mlir (that registers the
``lazy`` device, which must not happen in the ts_lazy worker)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field


RESULT_TAG = "@@RESULT@@"


BACKENDS = ("eager", "compile", "ts_lazy", "lazy_mlir", "lazy_mlir_step", "lazy_mlir_compile")


"""``lazy_mlir_step``: the same step through ``lm.compile_train_step`` (replayed
as one compiled graph once it repeats; plain lazy steps when it cannot).
``lazy_mlir_compile``: the step through ``torch.compile(step, backend="lazy_mlir")``
on CPU tensors, as the ``compile`` row does with inductor."""


MODELS = ("cnn", "lenet", "mlp")


CONV_MODELS = ("same", "depthwise")


"""Optional rows (``--models same,depthwise``), batch 32 on 1x28x28 inputs:
``same``: 3x3 convolutions with padding 1, max pool, a 3x3 stride-2 one and
batch norm; ``depthwise``: a depthwise 3x3 and a 1x1 convolution (MobileNet's
block). The convolution shapes the four rows above lack."""


REL_TOL = 1e-3          # every backend: step-1 loss vs eager, relative


COMPILE_ABS_TOL = 1e-4  # torch.compile: step-1 loss vs eager, absolute


DRIFT_REL_TOL = 1e-3    # steps 2-4 (informational): loss vs eager, relative


@dataclass(frozen=True)
class Spec:
    name: str
    batch: int
    steps: int  # default number of timed steps

    @property
    def key(self) -> str:
        return f"{self.name}_b{self.batch}"


def default_specs(models, quick: bool, steps: int | None) -> list[Spec]:
    """The rows to run: CNN b64, LeNet b64 (+ b1 unless quick), MLP b128.

    Default step counts give each row a second or more of lazy-mlir steps:
    on a shared machine a burst of load took the median of 20 LeNet steps
    (80 ms) from 4 to 8 ms."""
    out = []
    for m in models:
        if m == "cnn":
            rows = [(64, 30)]
        elif m == "lenet":
            rows = [(64, 200)] if quick else [(64, 200), (1, 1000)]
        elif m == "mlp":
            rows = [(128, 100)]
        elif m in CONV_MODELS:
            rows = [(32, 50)]
        else:
            raise SystemExit(f"unknown model {m!r}; choose from "
                             f"{', '.join(MODELS + CONV_MODELS)}")
        out += [Spec(m, b, steps if steps is not None else (5 if quick else n))
                for b, n in rows]
    return out


def zoo_module(filename: str):
    """``lazy_mlir/models/<filename>`` (a model zoo) loaded from its file,
    without importing the ``lazy_mlir`` package: importing it registers the ``lazy`` device, which
    must not happen in the ts_lazy worker (nor in the driver)."""
    import importlib.util
    name = "_bench_" + filename.removesuffix(".py")
    if name in sys.modules:
        return sys.modules[name]
    pkg = importlib.util.find_spec("lazy_mlir")
    if pkg is None or not pkg.submodule_search_locations:
        raise ImportError("lazy_mlir is not importable: run `pip install -e .` in the repo, "
                          "or set PYTHONPATH to the repo's root")
    path = os.path.join(list(pkg.submodule_search_locations)[0], "models", filename)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def seed_models():
    """``lazy_mlir.models.seed``, loaded by ``zoo_module``."""
    return zoo_module("seed.py")


def build(name: str):
    """(model, optimizer factory, loss function) for a model name."""
    import torch
    import torch.nn.functional as F
    sm = seed_models()
    LeNet5, MLP, MnistCNN = sm.LeNet5, sm.MLP, sm.MnistCNN
    if name == "cnn":
        return (MnistCNN(dropout=False),
                lambda p: torch.optim.Adadelta(p, lr=1.0),
                lambda out, y: F.nll_loss(out, y))
    if name == "lenet":
        return (LeNet5(),
                lambda p: torch.optim.SGD(p, lr=0.001),
                lambda out, y: F.nll_loss(F.log_softmax(out, dim=1), y))
    if name == "mlp":
        return (MLP((784, 1024, 1024, 10)),
                lambda p, **kw: torch.optim.Adam(p, lr=1e-3, **kw),
                lambda out, y: F.cross_entropy(out, y))
    if name in CONV_MODELS:
        return (_conv_model(name), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                lambda out, y: F.cross_entropy(out, y))
    raise ValueError(name)


def _conv_model(name: str):
    import torch.nn as nn
    if name == "same":
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU(),
        nn.Conv2d(32, 64, 1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 14 * 14, 10))


def make_inputs(spec: Spec, path: str, seed: int = 0) -> None:
    """Create the batch and the initial weights once; every backend loads them."""
    import torch
    torch.manual_seed(seed)
    model, _, _ = build(spec.name)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(spec.batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (spec.batch,), generator=g, dtype=torch.int64)
    torch.save({"x": x, "y": y, "state": model.state_dict()}, path)


@dataclass
class Row:
    spec: Spec
    backend: str
    res: dict = field(default_factory=dict)
    correctness: str = ""
    notes: list[str] = field(default_factory=list)
