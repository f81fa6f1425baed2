"""Shared parameters stay shared when a module moves to the lazy device.

``Module.to(device)`` converts each module's parameters one module at a time.
For a device whose tensors can take the CPU tensor's place (``param.data =``:
cpu, cuda) a weight two layers share (tied embeddings, ``b.weight =
a.weight``) stays one Parameter. A lazy tensor cannot (as on PyTorch/XLA and
PyTorch's own lazy backend): each module gets a new Parameter, the tie is
silently cut, the optimizer updates two copies and training drifts from
eager. ``keep_ties()`` wraps ``Module._apply`` (behind ``.to``, ``.float()``,
...): a parameter or buffer held in several places before the outermost call
is held by the first place's new tensor in all of them after it, when that is
a lazy tensor or was one (``.to("lazy")``, ``.cpu()`` back). Other
conversions are untouched.
"""
from __future__ import annotations

import threading

import torch

_inside = threading.local()


def _places(module: torch.nn.Module) -> list[tuple[object, list[tuple[dict, str]]]]:
    """(tensor, its (dict, key) places) of every tensor held in more than one
    place below ``module``."""
    by_id: dict[int, tuple[object, list[tuple[dict, str]]]] = {}
    for m in module.modules():
        for held in (m._parameters, m._buffers):
            for key, t in held.items():
                if t is not None:
                    by_id.setdefault(id(t), (t, []))[1].append((held, key))
    return [entry for entry in by_id.values() if len(entry[1]) > 1]


def keep_ties() -> None:
    """Wrap ``torch.nn.Module._apply`` (once per process)."""
    from .tensor import LazyTensor
    original = torch.nn.Module._apply
    if getattr(original, "_lazy_mlir_keeps_ties", False):
        return

    def _apply(self, fn, recurse=True):
        if getattr(_inside, "active", False) or not recurse:
            return original(self, fn, recurse)
        shared = _places(self)
        _inside.active = True
        try:
            out = original(self, fn, recurse)
        finally:
            _inside.active = False
        for before, places in shared:
            held, key = places[0]
            first = held[key]
            if isinstance(first, LazyTensor) or isinstance(before, LazyTensor):
                for other, other_key in places[1:]:
                    other[other_key] = first
        return out

    _apply._lazy_mlir_keeps_ties = True
    torch.nn.Module._apply = _apply
