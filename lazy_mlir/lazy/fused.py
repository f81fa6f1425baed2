"""What the fused kernels (``attention``, ``linear``, ``rnn``) share.

Each records one ``lazy_mlir`` node where PyTorch's composite would record
several, and each keeps PyTorch's path when the node cannot be compiled: the
config has decompositions off (the node exists only to be decomposed before
import), or a failed compile denied one of its ops. That part of the decision,
and the counted way back to the composite, are the same for all of them.
"""
from __future__ import annotations

import torch

from .. import metrics
from ..config import current_config
from ..ops import support as _support
from .tensor import LazyTensor

_COMPOSITE = torch._C.DispatchKey.CompositeImplicitAutograd


def all_lazy(tensors) -> bool:
    """Every tensor given is a lazy tensor (None entries are skipped). A plain
    loop: it runs on every linear call, where a generator cost 0.2 us more."""
    for t in tensors:
        if t is not None and type(t) is not LazyTensor:
            return False
    return True


def compile_reason(*ops) -> str | None:
    """Why the fused node cannot be compiled here (``ops``: the node's forward
    and backward overloads), or None."""
    if not current_config().decompositions:
        return "decompositions off"
    for op in ops:
        if not _support.op_is_supported(op):
            return "denied"
    return None


def composite(kind: str, why: str, op, *args, **kwargs):
    """Run PyTorch's CompositeImplicitAutograd kernel of ``op``, counted as
    ``<kind>_unfused::<why>`` so a model that lost its fused path shows it."""
    metrics.counter_inc(f"{kind}_unfused::{why}")
    return op._op_dk(_COMPOSITE, *args, **kwargs)
