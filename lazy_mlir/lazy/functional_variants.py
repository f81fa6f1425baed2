"""The functional overload of an op that writes arguments other than
``self`` (batch norm's running statistics), as functionalization records it."""
from __future__ import annotations

import torch

aten = torch.ops.aten


def functional_variant(func):
    """``native_batch_norm`` -> ``_native_batch_norm_legit_functional``: the op
    functionalization uses, returning the mutated arguments' new values last
    (kept on the op: batch norm calls this every step)."""
    try:
        return func._lazy_mlir_functional_variant
    except AttributeError:
        variant = _find(func)
    try:
        func._lazy_mlir_functional_variant = variant
    except (AttributeError, TypeError):
        pass
    return variant


def _find(func):
    if func is aten.native_batch_norm.default:
        return aten._native_batch_norm_legit_functional.default
    packet = getattr(aten, func.__name__.split(".")[0] + "_functional", None)
    if packet is not None and "default" in packet.overloads():
        return packet.default
    return None
