"""Host reads of values computed from constants alone: answered at capture.

``transformers`` reads values on the host that its own code computed from
constants: ``find_packed_sequence_indices`` asks whether positions made by
``arange`` restart (``(mask[:, -1] == 0).all()``) in every causal mask built
without an attention mask and a cache (GPT-2, BART, Marian in training). On
the lazy device such a read used to compile and run a graph of its own, and
``compile_train_step`` refused to replay the step (a host read).

When the value read depends on no tensor data, only on ops whose inputs are
constants of the step (the data of deterministic factories such as
``arange``, lifted Python scalars and view offsets), it is the same on every run of the step: ``value`` computes it here
on the CPU by running the recorded ATen ops on host tensors (eager's own
kernels, so eager's value), and counts ``folded::<op>`` instead of a sync.
A value that reads any other data (parameters, a batch, optimizer state), a
random op, or a graph of more than ``MAX_NODES`` ops is left to the sync.
"""
from __future__ import annotations

import torch

from ..graph import argtree
from ..graph.ir import Value

MAX_NODES = 64
MAX_CONSTANT = 4096  # elements: the largest factory result device.py shares


def _lifted() -> set[int]:
    """ids of the data of lifted Python scalars and view offsets, and of
    the shared results of deterministic factories (``device._host_factory``)."""
    from .capture import value_of
    from .state import factory_values, lifted_ints, scalar_tensors
    out = {id(value_of(t).data) for t in list(scalar_tensors.values())}
    out.update(id(v.data) for kept in list(lifted_ints.values()) for v in kept)
    out.update(id(v.data) for v in list(factory_values.values()))
    return out


def _constant(data, lifted: list) -> bool:
    """Whether ``data`` is a constant of the step: made by a deterministic
    factory (``arange``) or a lifted scalar or offset."""
    if data.host is None or data.future is not None or data.host.numel() > MAX_CONSTANT:
        return False  # (a parameter or a batch, most often: no table built)
    if not lifted:
        lifted.append(_lifted())
    return id(data) in lifted[0]


def _constant_nodes(v: Value) -> list | None:
    """The nodes computing ``v``, in recording order, when it reads no data
    but constants of the step; else None."""
    nodes, seen, todo, lifted = [], set(), [v], []
    while todo:
        x = todo.pop()
        if x.data is not None:
            if not _constant(x.data, lifted):
                return None
            continue
        node = x.node
        if id(node) in seen:
            continue
        if len(nodes) == MAX_NODES or torch.Tag.nondeterministic_seeded in getattr(
                node.op, "tags", (torch.Tag.nondeterministic_seeded,)):
            return None
        seen.add(id(node))
        nodes.append(node)
        todo += node.inputs
    return sorted(nodes, key=lambda n: n.serial)


def value(v: Value) -> torch.Tensor | None:
    """``v`` computed on the host when it depends on constants only, else None."""
    if v.data is not None:
        return None
    nodes = _constant_nodes(v)
    if nodes is None:
        return None
    outs: dict[int, list] = {}

    def host(x):
        if type(x) is not Value:
            return x
        if x.data is not None:
            return x.data.host
        return outs[id(x.node)][x.index]

    try:
        for node in nodes:
            args, kwargs = argtree.unflatten([host(a) for a in node.flat], node.tree)
            out = node.op(*args, **kwargs)
            outs[id(node)] = list(out) if isinstance(out, (list, tuple)) else [out]
        return host(v)
    except Exception:  # noqa: BLE001 - an op that runs only compiled: the sync computes it
        return None


def values(flat: list, value_of) -> list | None:
    """``flat`` with each lazy tensor replaced by its host value computed
    here (``value``), or None when one of them cannot be."""
    from .tensor import LazyTensor
    lazy = [a for a in flat if isinstance(a, LazyTensor)]
    if not lazy:
        return None
    out = []
    for a in flat:
        if isinstance(a, LazyTensor):
            a = value(value_of(a))
            if a is None:
                return None
        out.append(a)
    return out
