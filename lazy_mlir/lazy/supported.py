"""What the compiler takes, and the log of what it did not.

``supported``/``dtypes_supported`` say whether an op on given arguments can
be compiled; ``note_fallback`` counts an op that ran eagerly instead
(``aten::<op>``) and logs a warning the first time each op does.
"""
from __future__ import annotations

import logging

import torch

from .. import metrics
from ..graph.ir import Value
from ..ops import support as _support
from ..ops.subgraph import ops as _subgraph_ops
from ..passes import complex_as_real as _complex
from .state import fallback_warned as _warned

log = logging.getLogger("lazy_mlir")

# dtypes the pipeline does not lower (complex and quantized types).
UNSUPPORTED_DTYPES = {torch.complex32, torch.complex64, torch.complex128, torch.qint8,
                      torch.quint8, torch.qint32, torch.quint4x2,
                      torch.float8_e4m3fn, torch.float8_e5m2}


def supported(func, values) -> bool:
    """True when ``func`` on these arguments can be compiled."""
    return ((_support.op_is_supported(func) or complex_rewritten(func, values))
            and dtypes_supported(values, func))


def dtypes_supported(values, func=None) -> bool:
    """No argument is of a dtype the pipeline does not lower: complex only
    where ``passes/complex_as_real`` rewrites ``func`` in real arithmetic."""
    for v in values:
        if isinstance(v, Value) and v.spec.dtype in UNSUPPORTED_DTYPES \
                and not dtype_compiled(func, v.spec.dtype):
            return False
        if isinstance(v, complex):
            return False
    return True


def dtype_compiled(func, dtype: torch.dtype) -> bool:
    """Whether ``func`` reading or making ``dtype`` compiles: any dtype but
    those in ``UNSUPPORTED_DTYPES``, complex64 for the ops
    ``passes/complex_as_real`` rewrites (and backward templates of them)."""
    if dtype not in UNSUPPORTED_DTYPES:
        return True
    return dtype in _complex.TAKEN and func is not None and (
        _complex.handles(func) or func is _SUBGRAPH)


# A backward traced once (``lazy/backward.py``): its template's complex ops
# were each checked by ``dtype_compiled`` when it was traced.
_SUBGRAPH = _subgraph_ops.subgraph.default


def complex_rewritten(func, values) -> bool:
    """Some argument is complex and ``passes/complex_as_real`` writes
    ``func`` in real arithmetic (``_conj_physical``, ``angle``: compiled on
    complex tensors although the torch dialect lacks them)."""
    return _complex.handles(func) and (func in _complex.FROM_REAL or any(
        isinstance(v, Value) and v.spec.dtype in _complex.TAKEN for v in values))


def note_fallback(name: str, why: str) -> None:
    metrics.counter_inc("aten::" + name)
    if name not in _warned:
        _warned.add(name)
        log.warning("lazy-mlir: aten::%s runs eagerly on the CPU (%s); it is counted "
                    "as a fallback in lm.metrics", name, why)
