"""Parameters keep their identity, and shared ones stay shared, when a module
moves to the lazy device.

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

The same cut loses the optimizer: on cpu and cuda ``model.to(device)`` keeps
each Parameter object, so an optimizer made before the move (pygcn,
``optimizer = Adam(model.parameters()); model.cuda()``) updates the moved
weights. Here it kept the old CPU Parameters and the model never trained, so
the first place's new tensor is swapped into the old object
(``torch.utils.swap_tensors``, what ``_apply`` does for traceable subclasses)
and that object is held in every place.
"""
from __future__ import annotations

import threading

import torch

_inside = threading.local()


def _places(module: torch.nn.Module) -> list[tuple[object, list[tuple[dict, str]]]]:
    """(tensor, its (dict, key) places) of every parameter and buffer below
    ``module``."""
    by_id: dict[int, tuple[object, list[tuple[dict, str]]]] = {}
    for m in module.modules():
        for held in (m._parameters, m._buffers):
            for key, t in held.items():
                if t is not None:
                    by_id.setdefault(id(t), (t, []))[1].append((held, key))
    return list(by_id.values())


def _swapped_into(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """``before`` holding ``after``'s tensor, or ``after`` where they cannot be
    swapped (another holder of the C++ tensor: a live autograd graph)."""
    if not (isinstance(before, torch.nn.Parameter) and isinstance(after, torch.nn.Parameter)):
        return after  # buffers: only kept shared
    try:
        torch.utils.swap_tensors(before, after)
    except RuntimeError:
        return after
    return before


def keep_ties() -> None:
    """Wrap ``torch.nn.Module._apply`` (once per process)."""
    from .tensor import LazyTensor
    original = torch.nn.Module._apply
    if getattr(original, "_lazy_mlir_keeps_ties", False):
        return

    def _apply(self, fn, recurse=True):
        if getattr(_inside, "active", False) or not recurse:
            return original(self, fn, recurse)
        held_places = _places(self)
        _inside.active = True
        try:
            out = original(self, fn, recurse)
        finally:
            _inside.active = False
        for before, places in held_places:
            held, key = places[0]
            first = held[key]
            if first is not before and (isinstance(first, LazyTensor)
                                        or isinstance(before, LazyTensor)):
                kept = _swapped_into(before, first)
                for other, other_key in places:
                    other[other_key] = kept
        return out

    _apply._lazy_mlir_keeps_ties = True
    torch.nn.Module._apply = _apply
