"""Host reads answered on the host, without a graph of their own.

``transformers`` reads values on the host that its own code computed from
constants: ``find_packed_sequence_indices`` asks whether positions made by
``arange`` restart (``(mask[:, -1] == 0).all()``) in every causal mask built
without an attention mask and a cache (GPT-2, Mistral, BART in training). On
the lazy device such a read used to compile and run a graph of its own, and
``compile_train_step`` refused to replay the step (a host read).

When the value read depends on no tensor data, only on ops whose inputs are
constants of the step (the data of deterministic factories such as
``arange``, lifted Python scalars and view offsets), it is the same on every
run of the step: ``value`` computes it here on the CPU by running the
recorded ATen ops on host tensors (eager's own kernels, so eager's value),
and counts ``folded::<op>`` instead of a sync. A value that reads any other
data (parameters, a batch, optimizer state), a random op, or a graph of more
than ``MAX_NODES`` ops is left to the sync.

While ``compile_train_step`` records a step (``log_reads``), a read of its
batch (``pad in input_ids[:, [-1, 0]]``, transformers'
``warn_if_padding_and_no_attention_mask`` in ~30 model families) is
answered the same way and kept as a ``Read``: the ops from the batch to the
value, without the graph. A replay first runs them on the new batch
(``reads_hold``, host ops on a few values) and runs the plain step where a
value differs, since the step's Python would then take another path. Reads
of the state (parameters, optimizer state) are never answered so.
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


def _batch_position(data) -> int | None:
    """Where ``data`` is in the batch of the step ``compile_train_step``
    records (``log_reads``), when its values are on the host."""
    log = _log[0]
    if log is None or data.host is None or data.future is not None:
        return None
    return log[0].get(id(data))


def _other_host_data(data) -> bool:
    """While a step is recorded: small host data other than the state (an
    index list given to ``ids[:, [-1, 0]]``), kept in the ``Read`` by value
    and compared between the two recordings, as the graph's constants are."""
    log = _log[0]
    return (log is not None and data.host is not None and data.future is None
            and data.host.numel() <= MAX_CONSTANT and id(data) not in log[2])


def _nodes(v: Value) -> list | None:
    """The nodes computing ``v``, in recording order, when it reads no data
    but constants of the step (and, while a step is recorded, its batch);
    else None."""
    nodes, seen, todo, lifted = [], set(), [v], []
    while todo:
        x = todo.pop()
        if x.data is not None:
            if _batch_position(x.data) is None and not _constant(x.data, lifted) \
                    and not _other_host_data(x.data):
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


class Read:
    """A host read of the batch in a step ``compile_train_step`` recorded:
    the ops from the batch (and constants) to the value read, without the
    graph's nodes, and the value. ``holds(batch)``: whether another batch
    gives the same value (then the step's Python would take the same path)."""

    __slots__ = ("steps", "result")

    def __init__(self, nodes: list, result: torch.Tensor):
        where = {id(n): k for k, n in enumerate(nodes)}
        self.steps = [(n.op, [_ref(a, where) for a in n.flat], n.tree) for n in nodes]
        self.result = result

    def run(self, batch: list) -> torch.Tensor:
        outs: list = []
        for op, flat, tree in self.steps:
            args, kwargs = argtree.unflatten([_get(a, outs, batch) for a in flat], tree)
            out = op(*args, **kwargs)
            outs.append(list(out) if isinstance(out, (list, tuple)) else [out])
        return outs[-1][0]

    def holds(self, batch: list) -> bool:
        try:
            got = self.run(batch)
        except Exception:  # noqa: BLE001 - (a new batch shape an op refuses): not the same
            return False
        return got.shape == self.result.shape and bool(torch.equal(got, self.result))


def _ref(a, where: dict):
    if type(a) is not Value:
        return ("k", a)
    if a.data is None:
        return ("n", where[id(a.node)], a.index)
    k = _batch_position(a.data)
    return ("c", a.data.host) if k is None else ("b", k)


def _get(ref, outs: list, batch: list):
    kind = ref[0]
    if kind == "n":
        return outs[ref[1]][ref[2]]
    if kind == "b":
        return batch[ref[1]]
    return ref[1]


def value(v: Value) -> torch.Tensor | None:
    """``v`` computed on the host when it depends on constants only (or,
    while ``compile_train_step`` records a step, on its batch too: logged
    as a ``Read``), else None."""
    if v.data is not None:
        return None
    nodes = _nodes(v)
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
        result = host(v)
    except Exception:  # noqa: BLE001 - an op that runs only compiled: the sync computes it
        return None
    if _log[0] is not None:
        read = Read(nodes, result)
        if any(r[0] == "b" for _, flat, _ in read.steps for r in flat):
            if v.node is not nodes[-1] or v.index != 0:
                return None  # (not the last op's first output: not kept as a Read)
            _log[0][1].append(read)
    return result


_log: list = [None]  # while compile_train_step records: ({id(batch data): position}, [Read],
#                       {id(state data)})


def log_reads(batch: list, state: list) -> list:
    """Answer host reads of the batch (``batch``: its DeviceData, in order)
    on the host until ``stop_logging``, never those of the ``state`` (its
    DeviceData); returns the list of their ``Read``."""
    _log[0] = ({id(d): i for i, d in enumerate(batch)}, [], {id(d) for d in state})
    return _log[0][1]


def stop_logging() -> None:
    _log[0] = None


def reads_hold(reads, batch: list) -> bool:
    """Whether every ``Read`` gives its value again on ``batch`` (DeviceData)."""
    if not reads:
        return True
    hosts = [d.host for d in batch]
    if any(h is None for h in hosts):
        return False
    return all(r.holds(hosts) for r in reads)


def same_reads(a, b) -> bool:
    """Two recordings read the same values, computed with the same constants."""
    return len(a) == len(b) and all(
        _same(x.result, y.result) and len(x.steps) == len(y.steps)
        and all(_same(r[1], q[1]) for (_, f, _), (_, g, _) in zip(x.steps, y.steps)
                for r, q in zip(f, g) if r[0] == "c" == q[0])
        for x, y in zip(a, b))


def _same(x, y) -> bool:
    return x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y))


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
