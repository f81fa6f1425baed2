"""An f64 constant truncated to f32 becomes an f32 constant (a linalg-stage
pass, every target).

torch-mlir gives a float argument of an op (a Python number: ``norm``'s
``p``) as an f64 constant and truncates it to the element type where it is
used. MLIR folds ``arith.truncf`` of a constant only when no bit is lost, so
``truncf 0.5`` folded and ``truncf 0.3`` stayed. Inside a dispatch that is
fine, but ``norm`` computes ``1 / p`` on the host, and with f64 kept
(``--iree-input-demote-f64-to-f32=false``) iree-compile cannot lower host
f64 arithmetic: ``failed to legalize operation 'arith.truncf'``, and
``x.norm(p=0.3)`` ran eagerly. The constant is rounded here as ``truncf``
rounds (to nearest, ties to even: numpy's ``float32``), so no value changes.
"""
from __future__ import annotations

import numpy as np

from ..dialects import linalg_edit as E


def fold_truncated_f64_constants(module) -> int:
    """Replace each ``arith.truncf`` f64 -> f32 of a constant by an f32
    constant; returns how many."""
    count = 0
    for op in E.ops_named(module, "arith.truncf"):
        if str(op.operands[0].type) != "f64" or str(op.results[0].type) != "f32":
            continue
        number = E.float_constant_of(op.operands[0])
        if number is None:
            continue
        E.replace_by_f32_constant(op, float(np.float32(number)))
        count += 1
    return count


def count_in(linalg_text: str) -> int:
    """A folded constant leaves no mark in the printed module: 0 (for the
    stage's notes, which name only passes that left one)."""
    return 0
