"""Forms torch.compile and lm.jit graphs hand over that torch-mlir 20261001
does not lower (each graph failed to compile and ran eagerly). The lazy
device's capture avoids most of them (it lifts numbers into tensors and
folds ops on empty tensors), so they reach the importer from the aot graphs
only; ``roll`` reached it from every way in.

- ``bitwise_and``/``or``/``xor`` with a number (``.Scalar``): the dialect
  has the ``.Tensor`` overloads only ("failed to legalize operation
  'torch.operator'"). The number as a 0-d tensor of eager's result type:
  the same promotion (a 0-d operand of a higher category wins, as the
  number does, ``bool_t | 3`` is int64).
- ``cat`` with a result of no elements: torch-mlir drops empty inputs and
  then builds a ``tensor.concat`` of none ("requires at least one input").
- ``view(dtype)`` of bool as uint8 or int8 (the lazy device's graphs too):
  no lowering, and no bitcast of i1 (``passes/bitcast.py``); a bool's byte
  is 0 or 1, so it is a conversion; a view as its own dtype (any dtype) is
  the tensor itself. A wider dtype as bool, or bool as a wider dtype, goes
  through uint8 bytes (a bitcast), where it failed to import in lm.jit and
  torch.compile ("failed to legalize operation 'torch.constant.int'",
  fuzzer seeds 900278, 900357). Back (uint8 or int8 as bool: a write through such a
  view of a bool tensor, ``lazy/views.py`` writes back so): ``!= 0``, where
  eager keeps the byte (a write of a byte other than 0 or 1 through it
  raises at the call: ``views._check_bool_bytes``; fuzzer seeds 400241,
  500133: the graph failed to compile and ran eagerly).
- ``roll``, as two slices and a ``cat`` per dim, the shift taken modulo
  the size: torch-mlir's pattern clamps a shift of the size or more (the
  tensor came back unrolled or wrongly rolled, silently: ``roll(7, 1)`` of
  5 columns), takes no roll without ``dims`` (``x.roll(2)``, the flattened
  tensor rolled: "failed to legalize operation 'torch.constant.int'"), and
  casts its slices to dynamic sizes, which IREE's ``concat`` of a roll of a
  roll did not compile ("expected dimension 0 of collapsed type to be
  static"; fuzzer seed 900129).
"""
from __future__ import annotations

import functools

import torch

from .registry import IMPORT, register_decomposition

aten = torch.ops.aten


def _with_tensor(tensor_op, number_first: bool = False):
    """``op.Scalar(tensor, number)`` (or ``op.Scalar_Tensor(number, tensor)``,
    ``number_first``) as ``op.Tensor`` with the number as a 0-d tensor of
    eager's result type."""
    def decomposition(a, b):
        x, number = (b, a) if number_first else (a, b)
        n = aten.scalar_tensor.default(number, dtype=torch.result_type(x, number), device=x.device)
        return tensor_op(n, x) if number_first else tensor_op(x, n)
    return decomposition


for _scalar_op, _tensor_op in ((aten.bitwise_and.Scalar, aten.bitwise_and.Tensor),
                               (aten.bitwise_or.Scalar, aten.bitwise_or.Tensor),
                               (aten.bitwise_xor.Scalar, aten.bitwise_xor.Tensor)):
    register_decomposition(_scalar_op, scope=IMPORT)(_with_tensor(_tensor_op))


@register_decomposition(aten.cat.default, scope=IMPORT)
def cat_of_nothing(tensors, dim=0):
    if not tensors or any(t.numel() for t in tensors):
        return NotImplemented
    # (eager skips 1-d empty inputs beside others of another rank)
    kept = [t for t in tensors if t.shape != (0,)] or tensors[:1]
    shape = list(kept[0].shape)
    d = dim % len(shape) if shape else 0
    if shape:
        shape[d] = sum(t.shape[d] for t in kept)
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    return aten.new_zeros.default(tensors[0], shape, dtype=dtype)


@register_decomposition(aten.view.dtype, scope=IMPORT)
def bool_bytes(x, dtype):
    if dtype == x.dtype:  # (an identity: torch-mlir has no lowering of it either)
        return aten.clone.default(x)
    if dtype == torch.bool and x.dtype in (torch.uint8, torch.int8):
        return aten.ne.Scalar(x, 0)  # (a write of bool bytes back through such a view)
    if dtype == torch.bool:  # wider: its bytes (a bitcast), each read as a bool
        return aten.ne.Scalar(aten.view.dtype(x, torch.uint8), 0)
    if x.dtype != torch.bool:
        return NotImplemented
    if dtype in (torch.uint8, torch.int8):
        return aten._to_copy.default(x, dtype=dtype)
    return aten.view.dtype(aten._to_copy.default(x, dtype=torch.uint8), dtype)


@register_decomposition(aten.roll.default, scope=IMPORT)
def roll_as_slices(x, shifts, dims=()):
    if len(dims) != len(shifts) and (len(dims) or len(shifts) != 1):
        return NotImplemented  # (eager raises)
    if x.numel() == 0:
        return aten.clone.default(x)
    if not len(dims):
        flat = roll_as_slices(aten.reshape.default(x, [-1]), shifts, [0])
        return aten.reshape.default(flat, list(x.shape))
    out = x
    for shift, d in zip(shifts, dims):
        n = x.shape[d]
        shift %= n
        if shift:
            out = aten.cat.default([aten.slice.Tensor(out, d, n - shift, n),
                                    aten.slice.Tensor(out, d, 0, n - shift)], d)
    return aten.clone.default(x) if out is x else out


# ``op.Scalar_Tensor`` (a number first: ``5.5 % x``, ``3 << x``): not in the dialect
# ("failed to legalize operation 'torch.operator'").
for _name in ("remainder", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
              "bitwise_right_shift"):
    register_decomposition(getattr(aten, _name).Scalar_Tensor, scope=IMPORT)(
        _with_tensor(getattr(aten, _name).Tensor, number_first=True))
