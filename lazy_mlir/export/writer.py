"""``export``: write an ahead-of-time artifact directory.

The artifact (``artifact.py`` documents its layout and guarantees) runs with
``iree-base-runtime`` and numpy alone. Here: capture (``capture.py``), bind
the stored tensors to IREE parameters (``dialects.export_import``), compile
for the target, and write the files.

Parameters:

- ``params="external"``: weights live in ``params.irpa`` and reach the module
  through IREE's ``io_parameters`` module at load time, so they can be
  replaced (``artifact.save_params``) without recompiling.
- ``params="embed"``: the same archive is given to iree-compile
  (``--iree-parameter-import``), which inlines the values as constants; the
  artifact is one self-contained ``module.vmfb``.

Guarantees: the artifact directory appears whole or not at all (it is built
next to ``path`` and renamed into place); an existing directory at ``path``
is replaced only if it is empty or an artifact; every file's sha256 is in
the manifest.
"""
from __future__ import annotations

import datetime
import hashlib
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from . import artifact
from .capture import Captured, ExportError, TensorInfo, capture_lazy, dtype_name
from .dynamic import capture_dynamic

log = logging.getLogger("lazy_mlir")

PARAMS_MODES = ("embed", "external")
# iree-compile inlines an imported parameter only up to this many bytes: all of them.
_IMPORT_ALL = 1 << 62


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host tensor as a numpy array (bfloat16 through ml_dtypes)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def write_archive(path: Path, tensors: list[tuple[str, torch.Tensor]]) -> list[dict]:
    """An IREE parameter archive of ``tensors``; their manifest entries."""
    arrays = [(name, to_numpy(t)) for name, t in tensors]
    artifact.write_archive(path, arrays)
    return [{"name": name, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
             "nbytes": int(a.nbytes)} for (name, t), (_, a) in zip(tensors, arrays)]


def _sha256(path: Path) -> dict:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return {"sha256": h.hexdigest(), "size": path.stat().st_size}


def _with_flags(config, target, extra: list[str]):
    """``config`` with ``extra`` iree-compile flags for ``target`` (after its own)."""
    others = tuple((k, v) for k, v in config.iree_flags if k != target.name)
    return config.replace(iree_flags=others + ((target.name,
                                                tuple(config.flags_for(target.name)) +
                                                tuple(extra)),))


def prepare_path(path) -> Path:
    if path is None:
        raise ExportError("lazy-mlir: export needs path=, the artifact directory to write")
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise ExportError(f"lazy-mlir: {path} exists and is not a directory")
        if any(path.iterdir()) and not (path / artifact.MANIFEST).is_file():
            raise ExportError(f"lazy-mlir: {path} is a non-empty directory that is not an "
                              "export artifact; not replacing it")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_artifact(captured: Captured, path, target, config, *, params: str, kind: str,
                   entry_name: str, state: list[str] = (), extra: dict | None = None) -> Path:
    """Compile ``captured`` for ``target`` and write the artifact at ``path``.

    ``state`` (train steps): names of stored tensors that are inputs of the
    entry point, kept in the archive as the initial state; every other stored
    tensor is bound to a parameter.
    """
    from ..dialects.runner import PipelineError
    from ..pipeline.compile import compile_module
    from ..pipeline.stages import Provenance, Stage
    if params not in PARAMS_MODES:
        raise ExportError(f"lazy-mlir: params must be one of {', '.join(PARAMS_MODES)}, "
                          f"not {params!r}")
    if config.input == "torch":
        raise ExportError("lazy-mlir: export compiles linalg; set the pipeline config's "
                          "input to 'linalg'")
    path = prepare_path(path)
    state_set = set(state)
    bound = [(k, t) for k, t in captured.stored if k not in state_set]
    keys = [None if isinstance(a, TensorInfo) else (None if a[0] in state_set else a[0])
            for a in captured.args]
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-export-", dir=path.parent))
    try:
        archive = tmp / artifact.PARAMS
        stored = captured.stored
        entries = write_archive(archive, stored) if stored else []
        for e in entries:
            e["role"] = "state" if e["name"] in state_set else \
                "constant" if e["name"].startswith("const.") else "parameter"
        flags_config = config
        if params == "embed" and bound:
            flags_config = _with_flags(config, target, [
                f"--iree-parameter-import={artifact.SCOPE}={archive}",
                f"--iree-parameter-import-maximum-size={_IMPORT_ALL}"])
        t0 = time.perf_counter()
        try:
            compiled = compile_module((Stage(captured.stage, captured.linalg, Provenance(
                f"lazy-mlir export ({captured.route})", 0.0)),), target, flags_config,
                bind=(entry_name, keys, artifact.SCOPE))
        except PipelineError as e:
            raise ExportError(str(e)) from None
        compile_seconds = time.perf_counter() - t0
        (tmp / artifact.MODULE).write_bytes(compiled.vmfb)
        if params == "embed":
            kept = [(k, t) for k, t in stored if k in state_set]
            entries = [e for e in entries if e["name"] in state_set]
            archive.unlink(missing_ok=True)
            if kept:
                write_archive(archive, kept)
        shutil.copyfile(artifact.__file__, tmp / artifact.RUNNER)
        manifest = _manifest(captured, compiled, target, config, tmp, params=params, kind=kind,
                             entry=_entry_json(captured, entry_name, list(state),
                                               compiled.clobbered),
                             entries=entries, bound=bound,
                             compile_seconds=compile_seconds, extra=extra)
        artifact._write_json(str(tmp / artifact.MANIFEST), manifest)
        for f in [tmp, *tmp.iterdir()]:
            artifact._usual_mode(str(f))
        _replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _manifest(captured: Captured, compiled, target, config, tmp: Path, *, params: str,
              kind: str, entry: dict, entries: list, bound: list, compile_seconds: float,
              extra: dict | None) -> dict:
    """The artifact's manifest.json, for the files already written in ``tmp``."""
    from ..compile_service.disk_cache import make_key, package_versions
    # The import path was temporary; say what it held instead.
    flags = [f"--iree-parameter-import={artifact.SCOPE}=<archive of the bound parameters>"
             if f.startswith("--iree-parameter-import=") else f for f in compiled.flags]
    digest = hashlib.sha256()
    if params == "embed":  # the module holds the weights: they are part of its identity
        for _, t in bound:
            digest.update(to_numpy(t).tobytes())
    return {
        "format": artifact.FORMAT,
        "format_version": artifact.FORMAT_VERSION,
        "kind": kind,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "entry": entry,
        "params": {
            "mode": params,
            "file": artifact.PARAMS if entries else None,
            "scope": artifact.SCOPE,
            "bound": [k for k, _ in bound],
            "entries": entries,
        },
        "target": {"name": target.name, "backend": target.backend,
                   "driver": target.driver, "flags": list(target.flags),
                   "device": target.device},
        "flags": flags,
        "pipeline": {"route": captured.route, "config": config.key},
        "versions": dict(package_versions()),
        "graph_key": captured.graph_key,
        "cache_key": make_key(captured.graph_key, target.cache_key,
                              f"{config.key}|export|{kind}|{params}|{digest.hexdigest()}"),
        "seconds": {**{k: round(v, 3) for k, v in captured.seconds.items()},
                    "compile": round(compile_seconds, 3)},
        **(extra or {}),
        "files": {name: _sha256(tmp / name) for name in
                  (artifact.MODULE, artifact.PARAMS, artifact.RUNNER) if (tmp / name).exists()},
    }


def _entry_json(captured: Captured, name: str, state: list[str],
                clobbered: tuple[int, ...]) -> dict:
    """The manifest's entry point: the arguments of ``main`` that are not
    bound to parameters (state first, for train steps), and the outputs."""
    in_index, inputs = {}, []
    for i, a in enumerate(captured.args):
        if isinstance(a, TensorInfo):
            info = a
        elif a[0] in state:
            info = TensorInfo(a[0], a[1].dtype, tuple(a[1].shape))
        else:
            continue
        in_index[i] = len(inputs)
        inputs.append(info.to_json())
    if [i["name"] for i in inputs[:len(state)]] != state:
        raise ExportError("lazy-mlir: internal: a train step's state must lead its inputs")
    entry = {
        "name": name,
        "function": name,
        "inputs": inputs,
        "outputs": [o.to_json() for o in captured.outputs],
        "output_structure": captured.output_structure,
        # Inputs a sort may write into: the runner passes copies (iree-org/iree#24665).
        "clobbered": sorted(in_index[i] for i in clobbered if i in in_index),
    }
    if captured.dims:
        entry["dims"] = captured.dims
    if captured.checks:  # (the last result: their flags)
        entry["checks"] = [list(c) for c in captured.checks]
    if state:
        entry["state"] = state
    return entry


def _replace_dir(new: Path, path: Path) -> None:
    """Move ``new`` to ``path``, replacing what is there (checked by ``prepare_path``)."""
    old = None
    if path.exists():
        old = Path(tempfile.mkdtemp(prefix=".tmp-old-", dir=path.parent))
        os.replace(path, old / "artifact")
    os.replace(new, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export(module_or_fn, example_args, target="cpu", path=None, params: str = "embed",
           dynamic_dims: dict | None = None, *, config=None, input_names=None,
           entry: str | None = None) -> Path:
    """Export ``module_or_fn`` called on ``example_args`` to the artifact
    directory ``path``; returns ``path``.

    ``module_or_fn``: an ``nn.Module`` (exported in the mode it is in: call
    ``.eval()`` for inference; its parameters and buffers are the params) or
    a function of tensors. ``example_args``: a tensor or a tuple of tensors
    (their shapes and dtypes are the signature). ``target``: a name for
    ``get_target`` (``cpu``, ``vulkan``, ``cuda``, ``cuda:sm_86``) or a
    ``Target``; compiling never needs the target's device. ``params``:
    ``"embed"`` or ``"external"`` (see the module docstring).
    ``dynamic_dims``: ``{"x": {0: "batch"}}`` makes those sizes free at run
    time (``dynamic.py``: one module with dynamic dimensions, its index checks
    raising in the artifact); a symbol may carry a range, ``("h", 4, 64)``
    or ``("h", 4)``, when the model only works for some sizes, and one name
    used on several inputs means one size. Without it shapes are static
    (through the lazy device). ``input_names`` overrides the names taken from the
    signature; ``entry`` the entry point's name (``forward`` for a module,
    else the function's name).
    """
    from ..dialects.runner import PipelineError
    from ..config import current_config
    from ..targets import Target, get_target
    t = target if isinstance(target, Target) else get_target(target)
    if isinstance(example_args, torch.Tensor):
        example_args = (example_args,)
    example_args = tuple(example_args)
    if not example_args or not all(isinstance(a, torch.Tensor) for a in example_args):
        raise ExportError("lazy-mlir: example_args must be a tensor or a tuple of tensors")
    example_args = tuple(a.detach().cpu() for a in example_args)
    if params not in PARAMS_MODES:
        raise ExportError(f"lazy-mlir: params must be one of {', '.join(PARAMS_MODES)}, "
                          f"not {params!r}")
    path = prepare_path(path)
    config = config or current_config()
    # An artifact runs without PyTorch.
    config = config.replace(host_blas=False, host_rnn=False, host_attention=False)
    if isinstance(module_or_fn, torch.nn.Module) and module_or_fn.training:
        log.warning("lazy-mlir: exporting %s in training mode (dropout, batch statistics); "
                    "call .eval() first to export inference", type(module_or_fn).__name__)
    try:
        if dynamic_dims:
            captured = capture_dynamic(module_or_fn, example_args, dynamic_dims, config,
                                       input_names)
        else:
            captured = capture_lazy(module_or_fn, example_args, config, input_names, t)
    except PipelineError as e:  # a lowering failed: its message names the repro
        raise ExportError(str(e)) from None
    if entry is None:
        entry = "forward" if isinstance(module_or_fn, torch.nn.Module) else \
            getattr(module_or_fn, "__name__", "main")
    if not entry.isidentifier():
        entry = "main"
    return write_artifact(captured, path, t, config, params=params, kind="function",
                          entry_name=entry)
