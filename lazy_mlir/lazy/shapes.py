"""Shape and dtype inference by running ops on meta tensors, memoized.

Meta kernels (and PyTorch's Python reference implementations behind some of
them) cost tens of microseconds per op; a training step repeats the same ops
on the same shapes every step, so results are memoized by (op, the specs of
tensor arguments, the constant arguments).
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_flatten

from ..graph.argtree import unflatten

from ..graph.ir import TensorSpec
from .eager_checks import probe
from .state import shape_memo as _memo  # (op, tree, specs, constants) -> outputs

META = torch.device("meta")


class Placeholder:
    """Stands for a tensor argument while arguments are flattened."""

    __slots__ = ("spec",)

    def __init__(self, spec: TensorSpec):
        self.spec = spec


def _is_meta(a) -> bool:
    return isinstance(a, torch.Tensor) and a.device.type == "meta"


def _device_to_meta(a):
    if isinstance(a, torch.device):
        return META
    return a


def no_shape_reason(e: Exception) -> str:
    """Why the meta kernel gave no output shape: PyTorch has none for the op,
    or the shape depends on the data (both raise NotImplementedError)."""
    if "no fake impl or Meta kernel" in str(e):
        return "PyTorch has no shape function (meta kernel) for it"
    if isinstance(e, RuntimeError) and not isinstance(e, NotImplementedError):
        return f"its shape function (meta kernel) refused it: {str(e).splitlines()[0][:120]}"
    return f"output shape depends on the data ({type(e).__name__})"


def infer(func, flat: list, treedef) -> list:
    """Output specs of ``func`` on arguments whose tensors are ``Placeholder``.

    Returns (flat outputs, their pytree or None for a single tensor): a ``TensorSpec`` for each tensor, the
    value itself for anything else. Raises what the meta kernel raises.
    """
    try:
        key = (func, treedef, tuple(a.spec if type(a) is Placeholder else const_key(a)
                                    for a in flat))
        hit = _memo.get(key)
    except TypeError:  # an unhashable constant: no memo
        key, hit = None, None
    if hit is not None:
        return hit
    metas = [a.spec.meta() if isinstance(a, Placeholder) else _device_to_meta(a) for a in flat]
    args, kwargs = unflatten(metas, treedef)
    out = func(*args, **kwargs)
    probe(func, metas, _is_meta, lambda flat: unflatten(flat, treedef), out)  # eager's checks
    if func is _LAYER_NORM:
        out = _layer_norm_as_cpu(args[0], out)
    if isinstance(out, torch.Tensor):
        leaves, out_tree = [out], None  # the common case: no pytree needed
    else:
        leaves, out_tree = tree_flatten(out)
    for o in leaves:
        if isinstance(o, torch.Tensor):
            require_strided(o)
    result = ([TensorSpec.of(o) if isinstance(o, torch.Tensor) else o for o in leaves], out_tree)
    if key is not None:
        if len(_memo) >= _MEMO_MAX:  # a float constant that changes every step: bound it
            _memo.clear()
        _memo[key] = result
    return result


_MEMO_MAX = 1 << 16

_LAYER_NORM = torch.ops.aten.native_layer_norm.default


def _layer_norm_as_cpu(x, out):
    """``native_layer_norm``'s mean and rstd in a float16 or bfloat16 input's
    dtype, as eager's CPU kernel and the compiled module (torch's
    decomposition casts them back on a cpu device) give them; the meta kernel
    keeps them in float32. A graph that returned them (a split step's early
    part under bf16 autocast: saved for the backward) handed a bfloat16
    buffer to a module declared to take float32, and the step crashed."""
    if x.dtype not in (torch.float16, torch.bfloat16):
        return out
    return out[0], out[1].to(x.dtype), out[2].to(x.dtype)


# Constants keyed by type and value: these types' equality is exact.
EXACT_CONSTS = frozenset({type(None), bool, int, str, torch.dtype, torch.device,
                          torch.memory_format, torch.layout})


def const_key(a):
    """A memo key for a constant argument that tells apart what ``==`` does
    not: ``1``, ``1.0`` and ``True`` (an int tensor plus 1.0 is float), and
    ``0.0`` and ``-0.0``. Raises TypeError for an unhashable one."""
    t = type(a)
    if t in EXACT_CONSTS:
        return (t, a)
    if t is float or t is complex:
        return (t, repr(a))
    if t is list or t is tuple:
        return (t, tuple(const_key(x) for x in a))
    hash(a)
    return (t, a)


def require_strided(t: torch.Tensor) -> None:
    """Sparse (and other non-strided) tensors have no place on the lazy
    device: a clear error rather than one from deep inside."""
    if t.layout != torch.strided:
        raise RuntimeError(
            f"lazy-mlir: {t.layout} tensors are not supported on the lazy device; "
            "keep them on the CPU (or .to_dense() them first)")
