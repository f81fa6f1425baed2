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
from .state import fallback_warned as _warned

log = logging.getLogger("lazy_mlir")

# dtypes the pipeline does not lower (complex and quantized types).
UNSUPPORTED_DTYPES = {torch.complex32, torch.complex64, torch.complex128, torch.qint8,
                      torch.quint8, torch.qint32, torch.quint4x2,
                      torch.float8_e4m3fn, torch.float8_e5m2}


def supported(func, values) -> bool:
    """True when ``func`` on these arguments can be compiled."""
    return _support.op_is_supported(func) and dtypes_supported(values)


def dtypes_supported(values) -> bool:
    """No argument is complex (or of another dtype the pipeline does not lower)."""
    for v in values:
        if isinstance(v, Value) and v.spec.dtype in UNSUPPORTED_DTYPES:
            return False
        if isinstance(v, complex):
            return False
    return True


def note_fallback(name: str, why: str) -> None:
    metrics.counter_inc("aten::" + name)
    if name not in _warned:
        _warned.add(name)
        log.warning("lazy-mlir: aten::%s runs eagerly on the CPU (%s); it is counted "
                    "as a fallback in lm.metrics", name, why)
