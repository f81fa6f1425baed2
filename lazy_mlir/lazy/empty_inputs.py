"""Ops on empty tensors whose result is not empty: folded, or run eagerly.

An op whose outputs are all empty needs no computation (``ir.Node`` binds
them to empty data). An op that reads an empty tensor and makes a non-empty
one (``mm`` of 5x0 by 0x10, ``var`` of nothing, ``index_add`` of no rows) is
an edge case torch-mlir and IREE get wrong in several ways: a SIGFPE in the
lowering (a division by the zero extent), a failed compile, or a wrong value
(``var`` of nothing is NaN in eager, not in the compiled graph).

When every tensor the op reads is empty, its result depends on shapes and
constant arguments alone: it is computed once, at capture, by ATen on empty
host tensors and enters the graph as a constant (``folded::<op>`` in the
metrics), exactly eager's value and no device work. When some input has
data (``index_add`` of no rows into a full tensor) the op runs eagerly,
except the few checked to compile right (see tests/e2e/test_bad_input.py).
"""
from __future__ import annotations

import torch

from ..graph import argtree
from ..ops import subgraph as subgraph_ops
from . import shapes
from ..graph.ir import TensorSpec, Value

aten = torch.ops.aten

# Checked to compile to eager's result with empty inputs.
COMPILES_WITH_EMPTY = {aten.cat.default, aten.sum.default, aten.sum.dim_IntList,
                       aten.mean.default, aten.mean.dim, aten.prod.default,
                       aten.prod.dim_int,
                       # (the sum fast path's offset2bag is empty: ops/embedding_bag's
                       # backward makes it again from the offsets, never reads it)
                       aten._embedding_bag_backward.default}

# Ops that take ``self`` for its dtype and device only: an empty one is fine.
READS_NO_DATA = {aten.new_empty.default, aten.new_empty_strided.default, aten.new_full.default,
                 aten.new_ones.default, aten.new_zeros.default}


def all_inputs_empty(vals: list) -> bool:
    """True when ``vals`` reads tensors and every one of them is empty."""
    tensors = [v for v in vals if type(v) is Value]
    return bool(tensors) and all(0 in v.spec.shape for v in tensors)


def fold(func, vals: list, tree):
    """``func``'s outputs computed by ATen on empty host tensors of the input
    specs (``vals`` as ``record`` sees them), or None when it cannot be
    folded: a random op (its draws would leave eager's stream) or one ATen
    itself rejects (its error is then raised by the eager fallback)."""
    if torch.Tag.nondeterministic_seeded in func.tags:
        return None
    host = [torch.empty_strided(v.spec.shape, v.spec.stride, dtype=v.spec.dtype)
            if type(v) is Value else v for v in vals]
    args, kwargs = argtree.unflatten(host, tree)
    try:
        return func(*args, **kwargs)
    except Exception:  # noqa: BLE001 - the eager fallback raises eager's error
        return None


_SUBGRAPH = subgraph_ops.ops.subgraph.default


def _empty_inputs_unread(vals: list) -> bool:
    """Whether a ``subgraph`` node's template reads each of its empty inputs
    with ops that take one (none at all: the sum fast path's empty
    ``offset2bag``, which the embedding bag backward's decomposition makes
    again from the offsets)."""
    key = next((v for v in vals if isinstance(v, str)), None)
    if key is None:
        return False
    tensors = [v for v in vals if type(v) is Value]
    placeholders = [n for n in subgraph_ops.template(key).gm.graph.nodes
                    if n.op == "placeholder"]
    if len(placeholders) != len(tensors):
        return False
    return all(u.target in COMPILES_WITH_EMPTY or u.target in READS_NO_DATA
               for p, v in zip(placeholders, tensors) if 0 in v.spec.shape for u in p.users)


def runs_eagerly(func, vals: list, tree) -> bool:
    """True when ``func`` reads an empty tensor and makes a non-empty one."""
    for v in vals:
        if type(v) is Value and 0 in v.spec.shape:
            break
    else:
        return False  # the common case: no empty input
    if func in COMPILES_WITH_EMPTY or func in READS_NO_DATA:
        return False
    if func is _SUBGRAPH and _empty_inputs_unread(vals):
        return False
    placeholders = [shapes.Placeholder(v.spec) if type(v) is Value else v for v in vals]
    try:
        out_flat, _ = shapes.infer(func, placeholders, tree)
    except Exception:  # some meta kernels fail on empty inputs (upsample_nearest2d
        return True      # of batch 0); eager computes it, or raises its own error
    return any(type(o) is TensorSpec and 0 not in o.shape for o in out_flat)
