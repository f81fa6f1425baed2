"""Saving and loading lazy tensors: ``torch.save`` / ``torch.load`` (default
``weights_only=True``, ``map_location`` cpu and lazy, a process without
lazy-mlir), ``load_state_dict``, ``lm.save`` and the streaming
``lm.serialization.save`` / ``load``."""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import lazy_mlir as lm
from e2e_helpers import Counters

LAZY = torch.device("lazy", 0)


def _trained(pending: bool):
    """A tiny model and its Adam after two steps on the lazy device; with
    ``pending``, a third step recorded and not launched."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("lazy")
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    x, y = torch.randn(4, 6).to("lazy"), torch.randn(4, 3).to("lazy")
    for step in range(3 if pending else 2):
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if step < 2:
            lm.mark_step()
    return model, opt


def _host(obj):
    """``obj`` with every tensor copied to the CPU (the expected values)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _host(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_host(v) for v in obj)
    return obj


def _assert_same(loaded, original, device=None):
    """Equal structures, each tensor with its original's value, on
    ``device`` (None: the original's device; Adam's ``step`` is a CPU one)."""
    if isinstance(original, torch.Tensor):
        assert isinstance(loaded, torch.Tensor), loaded
        assert loaded.device == (device or original.device), (loaded.device, original.device)
        assert torch.equal(loaded.detach().cpu(), original.detach().cpu())
    elif isinstance(original, dict):
        assert loaded.keys() == original.keys()
        for k in original:
            _assert_same(loaded[k], original[k], device)
    elif isinstance(original, (list, tuple)):
        assert len(loaded) == len(original)
        for a, b in zip(loaded, original):
            _assert_same(a, b, device)
    else:
        assert loaded == original


def test_torch_save_computes_pending_values_in_one_graph(tmp_path):
    model, opt = _trained(pending=True)
    counters = Counters()
    obj = {"model": model.state_dict(), "opt": opt.state_dict()}
    path = tmp_path / "ckpt.pt"
    torch.save(obj, path)
    # The pending step ran as the graph of the step before it: no compile.
    assert counters.delta("MarkStep") == 1
    assert counters.delta("UncachedCompile") == 0, counters.delta("UncachedCompile")
    with zipfile.ZipFile(path) as z:  # ordinary tensors: no lazy-mlir class in the file
        pickled = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert b"lazy_mlir" not in pickled and b"LazyTensor" not in pickled
    _assert_same(torch.load(path), obj)  # weights_only=True, each on the device saved from
    # (a tensor saved from the CPU, Adam's step, stays there: see serialization.py)
    _assert_same(torch.load(path, map_location="lazy"), obj)
    _assert_same(torch.load(path, map_location="cpu"), obj, torch.device("cpu"))
    assert torch.load(path)["opt"]["param_groups"] == opt.state_dict()["param_groups"]


def test_a_view_is_saved_as_its_value(tmp_path):
    base = torch.arange(12.0).reshape(3, 4).to("lazy")
    view = base[:, 1:3].t()
    torch.save({"view": view, "base": base}, tmp_path / "v.pt")
    loaded = torch.load(tmp_path / "v.pt")
    _assert_same(loaded, {"view": view, "base": base})
    loaded["view"].mul_(0)  # no longer a view of the loaded base
    assert torch.equal(loaded["base"].cpu(), torch.arange(12.0).reshape(3, 4))


def test_a_process_without_lazy_mlir_loads_on_the_cpu(tmp_path):
    x = torch.arange(12.0).reshape(3, 4)
    path = tmp_path / "t.pt"
    torch.save({"t": (x.to("lazy") * 2).requires_grad_(), "n": 3}, path)
    code = (f"import sys, torch; d = torch.load({str(path)!r}, map_location='cpu'); "
            "assert 'lazy_mlir' not in sys.modules; t = d['t']; "
            "assert t.device.type == 'cpu' and t.requires_grad and d['n'] == 3; "
            "print(t.detach().sum().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == (x * 2).sum().item()


def test_whole_module_round_trip(tmp_path):
    model, _ = _trained(pending=False)
    path = tmp_path / "model.pt"
    torch.save(model, path)
    expected = _host(model.state_dict())
    for kwargs, device in (({"weights_only": False}, LAZY),
                           ({"weights_only": False, "map_location": "cpu"}, torch.device("cpu"))):
        loaded = torch.load(path, **kwargs)
        assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in loaded.parameters())
        _assert_same(loaded.state_dict(), expected, device)
    # The default weights_only=True reads it once the module classes are allowed,
    # as for a CPU model: the file names no lazy-mlir class.
    with torch.serialization.safe_globals([nn.Sequential, nn.Linear, nn.ReLU]):
        loaded = torch.load(path)
    _assert_same(loaded.state_dict(), expected, LAZY)
    x = torch.randn(2, 6)
    torch.testing.assert_close(loaded(x.to("lazy")).cpu(), model(x.to("lazy")).cpu())


def test_pickle_round_trip_and_parameters():
    model, _ = _trained(pending=False)
    weight = model[0].weight
    copy = pickle.loads(pickle.dumps(weight))
    assert isinstance(copy, nn.Parameter) and copy.device == LAZY and copy.requires_grad
    assert torch.equal(copy.detach().cpu(), weight.detach().cpu())


def test_load_state_dict_from_cpu_and_lazy_tensors():
    source, _ = _trained(pending=False)
    expected = _host(source.state_dict())
    for sd in (expected, source.state_dict()):
        torch.manual_seed(7)
        target = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("lazy")
        target.load_state_dict(sd)
        _assert_same(target.state_dict(), expected, LAZY)


def test_lm_save_writes_cpu_tensors(tmp_path):
    model, opt = _trained(pending=True)
    path = tmp_path / "host.pt"
    lm.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    loaded = torch.load(path)  # weights_only=True
    _assert_same(loaded, _host({"model": model.state_dict(), "opt": opt.state_dict()}),
                 torch.device("cpu"))
    lm.save(model, tmp_path / "m.pt")  # a whole module: its parameters as CPU ones
    loaded = torch.load(tmp_path / "m.pt", weights_only=False)
    assert all(type(p) is nn.Parameter and p.device.type == "cpu" for p in loaded.parameters())


def test_streaming_save_and_load(tmp_path):
    model, opt = _trained(pending=True)
    cpu_tensor = torch.arange(5)
    obj = {"model": model.state_dict(), "opt": opt.state_dict(), "cpu": cpu_tensor,
           "twice": [model[0].bias, model[0].bias]}
    path = str(tmp_path / "ckpt")
    lm.serialization.save(obj, path)
    expected = _host(obj)
    files = sorted(os.listdir(path))
    # One file per distinct tensor (the bias saved twice is written once), and
    # an index without tensor data.
    distinct = len(model.state_dict()) + 2 * len(opt.state_dict()["state"]) + 1 + 1
    steps = sum(isinstance(s["step"], torch.Tensor) for s in opt.state_dict()["state"].values())
    assert len(files) == distinct + steps + 1 and "index.pt" in files
    assert os.path.getsize(os.path.join(path, "index.pt")) < 8192
    loaded = lm.serialization.load(path)  # each to the device it was saved from
    _assert_same(loaded["model"], expected["model"], LAZY)
    assert loaded["cpu"].device.type == "cpu" and torch.equal(loaded["cpu"], cpu_tensor)
    assert loaded["twice"][0] is loaded["twice"][1]
    _assert_same(lm.serialization.load(path, device="cpu"), expected, torch.device("cpu"))
    on_lazy = lm.serialization.load(path, device="lazy")
    _assert_same(on_lazy["opt"]["state"], expected["opt"]["state"], LAZY)
    with pytest.raises(RuntimeError, match="lm.serialization.load"):
        torch.load(os.path.join(path, "index.pt"), weights_only=False)


def test_streaming_whole_module_and_replacing(tmp_path):
    model, _ = _trained(pending=False)
    path = str(tmp_path / "model")
    lm.serialization.save({"old": torch.zeros(3)}, path)
    lm.serialization.save(model, path)  # replaces the earlier save
    assert not [n for n in os.listdir(tmp_path) if n != "model"]  # no temporary left
    with pytest.raises(Exception):  # a module is not a weights-only object
        lm.serialization.load(path)
    loaded = lm.serialization.load(path, weights_only=False)
    assert all(isinstance(p, nn.Parameter) and p.device == LAZY for p in loaded.parameters())
    _assert_same(loaded.state_dict(), _host(model.state_dict()), LAZY)
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        lm.serialization.save({"t": torch.ones(1)}, str(foreign))
    assert (foreign / "keep.txt").read_text() == "mine"


def test_dtypes_round_trip():
    values = {"f16": torch.randn(3).half(), "bf16": torch.randn(3).bfloat16(),
              "f64": torch.randn(2).double(), "i64": torch.arange(4) - 2,
              "i32": torch.arange(3, dtype=torch.int32), "i8": torch.arange(3, dtype=torch.int8),
              "bool": torch.tensor([True, False]), "empty": torch.zeros(0, 3),
              "scalar": torch.tensor(2.5)}
    # Computed on the device, read back from it (but bool and int8: an int8
    # multiply crashes torch-mlir's pipeline in-process; they are uploaded only).
    on_lazy = {k: v.to("lazy") if v.dtype in (torch.bool, torch.int8) else v.to("lazy") * 1
               for k, v in values.items()}
    buffer = io.BytesIO()
    torch.save(on_lazy, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    for k, v in values.items():
        assert loaded[k].device == LAZY and loaded[k].dtype == v.dtype, k
        assert torch.equal(loaded[k].cpu(), v), k


def test_resume_training_from_a_checkpoint(tmp_path):
    """Model and Adam state saved, loaded into new ones: the next step is
    the step the saved run takes."""
    model, opt = _trained(pending=False)
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, path)
    x, y = torch.randn(4, 6), torch.randn(4, 3)

    def step(m, o):
        o.zero_grad()
        loss = F.mse_loss(m(x.to("lazy")), y.to("lazy"))
        loss.backward()
        o.step()
        lm.mark_step()
        return loss.item()

    expected = step(model, opt)
    torch.manual_seed(9)
    resumed = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("lazy")
    resumed_opt = torch.optim.Adam(resumed.parameters(), lr=0.05)
    checkpoint = torch.load(path)
    resumed.load_state_dict(checkpoint["model"])
    resumed_opt.load_state_dict(checkpoint["opt"])
    assert step(resumed, resumed_opt) == pytest.approx(expected, rel=1e-6)
    for a, b in zip(resumed.parameters(), model.parameters()):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu())


def test_a_tensor_and_its_detach_load_as_two_tensors(tmp_path):
    """They read one host value: on the CPU they share its storage, as in
    eager, but stay two tensors, each with its own requires_grad."""
    a = torch.ones(3).to("lazy").requires_grad_()
    torch.save({"a": a, "d": a.detach()}, tmp_path / "a.pt")
    for where in ("cpu", None):
        loaded = torch.load(tmp_path / "a.pt", map_location=where)
        assert loaded["a"] is not loaded["d"]
        assert loaded["a"].requires_grad and not loaded["d"].requires_grad


def test_legacy_format_holds_cpu_tensors(tmp_path):
    """PyTorch's legacy loader fills storages after rebuilding the tensors:
    a lazy rebuild there would copy unfilled memory, so it gets CPU ones."""
    x = torch.arange(4.0)
    path = tmp_path / "legacy.pt"
    torch.save({"t": x.to("lazy") * 2}, path, _use_new_zipfile_serialization=False)
    loaded = torch.load(path)
    assert loaded["t"].device.type == "cpu" and torch.equal(loaded["t"], x * 2)


def test_safetensors_sees_storages_as_on_the_cpu(tmp_path):
    """safetensors tells shared tensors apart by ``untyped_storage().data_ptr()``
    (the wrapper's storage raised): a view and its base share one, two
    tensors do not, as for CPU tensors; the file holds the values."""
    from safetensors.torch import load_file, save_file
    base = torch.arange(12.0).to("lazy").mul(2)
    other = torch.ones(3).to("lazy")
    shared = {"base": base, "view": base[:4]}
    cpu_base = torch.arange(12.0)
    with pytest.raises(RuntimeError, match="share memory"):  # eager's answer
        save_file({"base": cpu_base, "view": cpu_base[:4]}, tmp_path / "cpu.safetensors")
    with pytest.raises(RuntimeError, match="share memory"):
        save_file(shared, tmp_path / "shared.safetensors")
    assert base.untyped_storage().data_ptr() == base[2:].untyped_storage().data_ptr()
    assert base.untyped_storage().data_ptr() != other.untyped_storage().data_ptr()
    assert base[2:].untyped_storage().nbytes() == 48
    save_file({"base": base, "other": other}, tmp_path / "t.safetensors")
    back = load_file(tmp_path / "t.safetensors")
    assert torch.equal(back["base"], torch.arange(12.0) * 2)
    assert torch.equal(back["other"], torch.ones(3))


def test_transformers_save_pretrained_round_trip(tmp_path):
    """``save_pretrained`` (safetensors, with GPT-2's tied input and output
    embeddings found by their storage) after a training step on the lazy
    device, then ``from_pretrained``: the same weights."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16)
    model = transformers.GPT2LMHeadModel(config).to("lazy")
    x = torch.randint(0, 64, (2, 8)).to("lazy")
    model(x, labels=x).loss.backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    lm.mark_step()
    model.save_pretrained(tmp_path)
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path)
    assert back.lm_head.weight.data_ptr() == back.transformer.wte.weight.data_ptr()
    for (name, want), got in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(want.cpu(), got), name
