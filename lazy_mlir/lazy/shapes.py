"""Shape and dtype inference by running ops on meta tensors, memoized.

Meta kernels (and PyTorch's Python reference implementations behind some of
them) cost tens of microseconds per op; a training step repeats the same ops
on the same shapes every step, so results are memoized by (op, the specs of
tensor arguments, the constant arguments).
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

from .argtree import unflatten

from .ir import TensorSpec

_memo: dict = {}
META = torch.device("meta")


class Placeholder:
    """Stands for a tensor argument while arguments are flattened."""

    __slots__ = ("spec",)

    def __init__(self, spec: TensorSpec):
        self.spec = spec


def _device_to_meta(a):
    if isinstance(a, torch.device):
        return META
    return a


def infer(func, flat: list, treedef) -> list:
    """Output specs of ``func`` on arguments whose tensors are ``Placeholder``.

    Returns (flat outputs, their pytree or None for a single tensor): a ``TensorSpec`` for each tensor, the
    value itself for anything else. Raises what the meta kernel raises.
    """
    key = (func, treedef, tuple(a.spec if type(a) is Placeholder else _hashable(a)
                                for a in flat))
    try:
        hit = _memo.get(key)
    except TypeError:  # an unhashable constant: no memo
        key, hit = None, None
    if hit is not None:
        return hit
    metas = [a.spec.meta() if isinstance(a, Placeholder) else _device_to_meta(a) for a in flat]
    args, kwargs = unflatten(metas, treedef)
    out = func(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        leaves, out_tree = [out], None  # the common case: no pytree needed
    else:
        leaves, out_tree = tree_flatten(out)
    for o in leaves:
        if isinstance(o, torch.Tensor):
            require_strided(o)
    result = ([TensorSpec.of(o) if isinstance(o, torch.Tensor) else o for o in leaves], out_tree)
    if key is not None:
        _memo[key] = result
    return result


def _hashable(a):
    if isinstance(a, list):
        return tuple(a)
    return a


def require_strided(t: torch.Tensor) -> None:
    """Sparse (and other non-strided) tensors have no place on the lazy
    device: a clear error rather than one from deep inside."""
    if t.layout != torch.strided:
        raise RuntimeError(
            f"lazy-mlir: {t.layout} tensors are not supported on the lazy device; "
            "keep them on the CPU (or .to_dense() them first)")
