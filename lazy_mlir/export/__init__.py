"""Ahead-of-time export: artifacts that run with iree-base-runtime and numpy.

``export(module_or_fn, example_args, target=..., path=..., params=...,
dynamic_dims=...)`` and ``export_train_step(model, loss_fn, optimizer,
example_batch, path=...)`` write an artifact directory; ``load(path)`` runs
one (``artifact.py`` documents the layout and guarantees).

This package is itself callable: ``lazy_mlir.export(model, x, path=...)`` is
``lazy_mlir.export.export(...)``. That lets ``lm.export`` be both the public
function the design names and this package, instead of a function attribute
that would hide the package (``import lazy_mlir.export as e`` would then
return the function).

Importing this package imports no torch of its own: ``load`` lives in
``artifact.py``, which needs only numpy and ``iree.runtime``, and the writers
are imported on first use. ``lazy_mlir/__init__.py`` does import torch, so a
torch-free process loads ``artifact.py`` by path, or the ``run.py`` copy every
artifact carries.
"""
from __future__ import annotations

import sys
import types

from .artifact import (ArtifactError, ExportedFunction, SignatureError, TrainStep, load,
                       read_manifest, read_params, save_params)

__all__ = ["export", "export_train_step", "load", "read_manifest", "read_params",
           "save_params", "ArtifactError", "SignatureError", "ExportError",
           "ExportedFunction", "TrainStep"]


def __getattr__(name):
    # The writers import torch and the compiler: only when asked for.
    if name == "export":
        from .writer import export
        return export
    if name == "export_train_step":
        from .train import export_train_step
        return export_train_step
    if name == "ExportError":
        from .capture import ExportError
        return ExportError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _CallablePackage(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from .writer import export
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
