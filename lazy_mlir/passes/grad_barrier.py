"""A returned matmul result behind a ``util.optimization_barrier`` (a
linalg-stage pass, cpu only).

A weight gradient is a matmul result that the graph returns (``p.grad``) and
that the optimizer's update reads (Adam, AdamW: ``m``, ``v`` and the new
parameter). On cpu IREE data-tiles the matmul, and its elementwise fusion
copies the result's unpacking into each consumer: the update of one weight
became 3 dispatches with ``m`` and ``v`` computed twice (ResNet medium's
AdamW on its conv weights, ~100 ms of a ~365 ms loaded profile). With the
result as a function argument IREE makes it one 3-result dispatch; behind the
barrier it does the same (2 dispatches instead of 4 for a 512x4608 weight
gradient and its AdamW update). The barrier costs no memory traffic: the
returned result is written out in any case. ``--iree-dispatch-creation-
enable-aggressive-fusion`` also merges them but breaks the max-pool
backward's compile.

The barrier goes on a ``linalg.matmul`` / ``linalg.batch_matmul`` result that
``main`` returns directly or through reshapes (``tensor.expand_shape`` /
``collapse_shape``), in generic form: torch-mlir only passes it through.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

MATMULS = ("linalg.matmul", "linalg.batch_matmul")
_RESHAPES = ("tensor.expand_shape", "tensor.collapse_shape")


def barrier_returned_matmuls(module) -> int:
    """Put each matmul result ``main`` returns behind a barrier; how many."""
    done = []
    for ret in E.ops_named(module, "func.return"):
        if E.function_name(ret) != "main":
            continue
        for value in ret.operands:
            while E.defining_op_name(value) in _RESHAPES:
                value = value.owner.operands[0]
            if E.defining_op_name(value) in MATMULS and not any(value == v for v in done):
                E.barrier_after(value)
                done.append(value)
    return len(done)
