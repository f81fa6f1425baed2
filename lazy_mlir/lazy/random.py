"""Random numbers inside the graph, from a seed that is a graph input.

Each random op draws a fresh 64-bit seed from PyTorch's CPU generator (so
``torch.manual_seed`` makes a run reproducible) and passes it to the graph as
a 0-dim input: a new mask every step, no recompile. The bits come from
splitmix64 over (seed, element index), written with integer aten ops that
torch-mlir lowers and that eager PyTorch computes identically (so a graph
that falls back to eager gives the same numbers).
"""
from __future__ import annotations

import math
import weakref

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..graph.ir import Value
from ..ops.random_fills import bernoulli_uniform
from .capture import assign, data_value
from .state import seed_logs as _seed_logs
from .sync import to_host
from .tensor import LazyTensor
from .views import check_write

aten = torch.ops.aten
_CPU = torch.device("cpu")


def _s64(c: int) -> int:
    return c - (1 << 64) if c >= (1 << 63) else c


def _const(emit, c, dtype=torch.int64) -> Value:
    return emit(aten.full.default, ([], c), {"dtype": dtype, "device": _CPU})[0]


def _op(emit, func, *args) -> Value:
    return emit(func, args, {})[0]


def new_seed() -> Value:
    seed = torch.randint(-(1 << 63), (1 << 63) - 1, (), dtype=torch.int64)
    v = data_value(seed)
    for log in _seed_logs:
        log.append(v.data)
    return v


def host_draw(draw) -> Value:
    """The data of a random fill drawn on the host by ``draw()`` (from
    PyTorch's CPU generator: eager's numbers), logged as a seed is:
    ``compile_train_step`` draws it anew per replay (``again``)."""
    v = data_value(draw())
    _redraws[v.data] = draw
    for log in _seed_logs:
        log.append(v.data)
    return v


def fill(func, args, kwargs):
    """A random fill (``normal_``, ``bernoulli_``, ...: ``kinds.RANDOM``),
    drawn on the host from PyTorch's CPU generator, so ``torch.manual_seed``
    gives the same numbers as eager CPU."""
    t = args[0]
    if t._view:
        check_write(t, func, args, kwargs)
    if (func is aten.bernoulli_.Tensor and isinstance(args[1], LazyTensor)
            and args[1].dtype.is_floating_point and kwargs.get("generator") is None):
        # (drawn as eager draws it, ``p`` kept in the graph: not read to the host)
        return aten.copy_.default(t, bernoulli_uniform(t, args[1]))
    flat, tree = tree_flatten((args[1:], kwargs))
    host_flat = [to_host(a) if isinstance(a, LazyTensor) else a for a in flat]
    hargs, hkwargs = tree_unflatten(host_flat, tree)
    # (in eager's memory order: a fill draws element after element of storage)
    stride = t.stride() if not t.is_contiguous() and _dense(t) else None

    def draw():
        host = (torch.empty_strided(t.shape, stride, dtype=t.dtype) if stride else
                torch.empty(t.shape, dtype=t.dtype))
        func(host, *hargs, **hkwargs)
        return host
    assign(t, host_draw(draw))  # (compile_train_step draws it again per replay)
    return t


def _dense(t) -> bool:
    """``t``'s elements fill a storage of its size without overlap, in some order."""
    return torch._prims_common.is_non_overlapping_and_dense_or_false(t)


def again(data):
    """New data for a logged draw: a new host fill like ``data``'s, or a
    new seed."""
    draw = _redraws.get(data)
    if draw is None:
        return new_seed().data
    v = data_value(draw())
    _redraws[v.data] = draw
    return v.data


_redraws: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def log_seeds() -> list:
    """A list that collects the device data of every seed drawn until
    ``stop_logging`` (``compile_train_step`` draws them anew per replay)."""
    log: list = []
    _seed_logs.append(log)
    return log


def stop_logging(log: list) -> None:
    _seed_logs.remove(log)


def _logical_shift(emit, z: Value, bits: int) -> Value:
    shifted = _op(emit, aten.bitwise_right_shift.Tensor, z, _const(emit, bits))
    return _op(emit, aten.bitwise_and.Tensor, shifted, _const(emit, (1 << (64 - bits)) - 1))


def uniform(emit, shape, seed: Value) -> Value:
    """float32 uniform in [0, 1) of ``shape`` (24 random bits per element)."""
    n = math.prod(shape)
    z = emit(aten.arange.default, (n,), {"dtype": torch.int64, "device": _CPU})[0]
    z = _op(emit, aten.mul.Tensor, z, _const(emit, _s64(0x9E3779B97F4A7C15)))
    z = _op(emit, aten.add.Tensor, z, seed)
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z = _op(emit, aten.bitwise_xor.Tensor, z, _logical_shift(emit, z, shift))
        z = _op(emit, aten.mul.Tensor, z, _const(emit, _s64(mult)))
    z = _op(emit, aten.bitwise_xor.Tensor, z, _logical_shift(emit, z, 31))
    top = _logical_shift(emit, z, 40)
    u = emit(aten._to_copy.default, (top,), {"dtype": torch.float32})[0]
    u = _op(emit, aten.mul.Tensor, u, _const(emit, 2.0 ** -24, torch.float32))
    return _op(emit, aten.view.default, u, list(shape))


def dropout(emit, x: Value, p: float) -> tuple[Value, Value]:
    """(output, keep mask) of ``native_dropout`` in training mode."""
    u = uniform(emit, x.spec.shape, new_seed())
    keep = _op(emit, aten.ge.Tensor, u, _const(emit, float(p), torch.float32))
    scale = _const(emit, 1.0 / (1.0 - p), x.spec.dtype)
    kept = _op(emit, aten.mul.Tensor, x, emit(aten._to_copy.default, (keep,),
                                               {"dtype": x.spec.dtype})[0])
    return _op(emit, aten.mul.Tensor, kept, scale), keep
