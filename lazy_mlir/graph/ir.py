"""Graph nodes of captured programs.

A ``Value`` is one tensor of the graph: either an output of a ``Node`` still to
be computed, or device data (``DeviceData``) that already exists. When a graph
runs, its outputs become device data in place (``Value.materialize``): later
graphs stop there and take them as inputs, and the nodes behind are freed.

Every node's key (sha256 over its op, constant arguments and output specs) is
memoized with the op's record plan; where its inputs come from enters the
graph's key (``graph.py``), which also keys device data by shape and dtype
only: keys are stable across processes and independent of tensor contents.
"""
from __future__ import annotations

import gc
import hashlib
import itertools
import weakref
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, strides, storage offset and dtype of a tensor (no data)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    # Kept once made: graph keys take the signature of every input.
    _hash: int = field(init=False, repr=False, compare=False)
    _sig: str | None = field(init=False, repr=False, compare=False, default=None)
    # One int per spec value (equal specs made in this process share it, and
    # no two different ones ever do: a counter, never reused): record plans
    # key each tensor argument by it, hashed and compared in C, where this
    # class's ``__hash__`` is a Python call (~0.1 us, 2-3 per captured op).
    key: int = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_hash", hash((self.shape, self.stride, self.offset, self.dtype)))
        same = _INTERNED.get(self)
        if same is None:
            if len(_INTERNED) >= _INTERNED_MAX:
                _INTERNED.clear()  # (a spec made later gets a new key: plans miss, once)
            _INTERNED[self] = self
            object.__setattr__(self, "key", next(_KEYS))
        else:
            object.__setattr__(self, "key", same.key)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self):  # a copy (another process) hashes anew
        return TensorSpec, (self.shape, self.stride, self.offset, self.dtype)

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSpec":
        """``t``'s spec, the one object of its value (``_INTERNED``)."""
        spec = TensorSpec(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
        return _INTERNED.get(spec, spec)

    def meta(self) -> torch.Tensor:
        """A meta tensor with exactly this layout (a view of a meta storage)."""
        # (exactly contiguous: a size-1 dim's stride too, which a view's
        # strides follow, as eager's: [3, 1] of strides (1, 3) viewed as itself)
        if self.offset == 0 and _is_contiguous(self.shape, self.stride) and \
                all(st == d for st, d in zip(self.stride, _dense_strides(self.shape))):
            return torch.empty(self.shape, dtype=self.dtype, device="meta")
        extent = 1 + self.offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride) if s)
        base = torch.empty(max(extent, 1), dtype=self.dtype, device="meta")
        return base.as_strided(self.shape, self.stride, self.offset)

    def signature(self) -> str:
        """``float32[2, 3]``: shape and dtype, the part of a spec keys use."""
        sig = self._sig
        if sig is None:
            key = (self.shape, self.dtype)
            sig = _SIGNATURES.get(key)
            if sig is None:
                sig = _SIGNATURES[key] = f"{str(self.dtype)[6:]}{list(self.shape)}"
            object.__setattr__(self, "_sig", sig)
        return sig


_SIGNATURES: dict = {}

# Every spec made, one object per value (``TensorSpec.of`` returns it): a
# step's parameters are then read with the very spec objects their record
# plans were made with (the fused optimizer's outputs are next step's inputs),
# and a spec's ``key`` comes from the first object of its value.
_INTERNED: dict = {}
_INTERNED_MAX = 1 << 16
_KEYS = itertools.count()


def _dense_strides(shape) -> list:
    strides, expected = [], 1
    for size in reversed(shape):
        strides.append(expected)
        expected *= max(size, 1)
    return strides[::-1]


def _is_contiguous(shape, stride) -> bool:
    expected = 1
    for size, st in zip(reversed(shape), reversed(stride)):
        if size != 1 and st != expected:
            return False
        expected *= size
    return True


class DeviceData:
    """A materialized tensor: a host copy, a device array, or both.

    The device array is made on first use as a graph input; the host copy on
    first read. Both are immutable once set: lazy tensors never write into
    device data, they rebind to new data.
    """

    __slots__ = ("host", "device", "spec", "future", "__weakref__")

    def __init__(self, spec: TensorSpec, host: torch.Tensor | None = None, device=None,
                 future=None):
        self.spec = spec
        self.host = host
        self.device = device
        self.future = future  # set while the graph computing it runs

    def wait(self) -> None:
        """Block until computed; re-raise the error of the graph that failed."""
        f = self.future
        if f is not None:
            f.result()
            self.future = None


class _LiveData:
    """Every DeviceData alive, when iterated (tests count them to prove dead
    buffers are freed). Found through the garbage collector's list of
    tracked objects, which runs no collection: a DeviceData kept alive only
    by a reference cycle is listed. Not a ``WeakSet`` that each DeviceData
    joins: that cost ~0.2 us at its making and a Python callback at its
    death, for every graph output of every step."""

    def __iter__(self):
        return iter([o for o in gc.get_objects() if type(o) is DeviceData])


live_data = _LiveData()


class Value:
    """One tensor of a graph: node output (pending) or device data (done)."""

    __slots__ = ("node", "index", "data", "spec", "__weakref__")

    def __init__(self, spec: TensorSpec, node: "Node | None" = None, index: int = 0,
                 data: DeviceData | None = None):
        self.spec = spec
        self.node = node
        self.index = index
        self.data = data

    @property
    def pending(self) -> bool:
        return self.data is None

    def materialize(self, data: DeviceData) -> None:
        """Bind computed data; drop the node so its graph can be freed."""
        self.data = data
        self.node = None

    @staticmethod
    def of_data(data: DeviceData) -> "Value":
        return Value(data.spec, data=data)


_SERIAL = itertools.count()


class Node:
    """One captured aten op. ``flat`` (its arguments flattened by ``argtree``,
    with ``tree`` to rebuild them) holds a ``Value`` where the op took a
    tensor; everything else is a constant baked into the key.

    A node holds its outputs weakly (``outputs`` remakes an unused one from
    its spec): a pending Value holds its node, and a strong reference back
    would make a cycle of every captured op, so that a dead graph, and the
    device buffers its inputs read (the previous step's parameters), would
    wait for Python's cyclic collector instead of being freed at once.

    Few objects per node: a step's nodes live until ``mark_step``, long
    enough to be promoted to the collector's oldest generation, and every
    promoted object brings the next full collection (which walks every
    object of the process: 0.15-0.2 s beside ``transformers``) nearer. So
    the inputs are not kept as a list of their own (``inputs`` filters
    ``flat``) and a node of one output holds its weak reference bare."""

    __slots__ = ("op", "flat", "tree", "specs", "_outs", "key", "location", "serial")

    def __init__(self, op, flat: list, tree: tuple, specs: list, key: bytes,
                 location: str | None = None):
        self.op = op
        self.flat = flat
        self.tree = tree
        self.specs = specs
        self.key = key
        self.location = location
        self._outs = None  # a weakref (one output) or a list of them
        self.serial = next(_SERIAL)  # its place in recording order (``Graph.build``)

    @property
    def inputs(self) -> list[Value]:
        """The Values among the arguments, in order."""
        return [v for v in self.flat if type(v) is Value]

    @property
    def outputs(self) -> list[Value]:
        """The output Values in order; one nothing uses any more is remade
        (pending, with its spec and index) for whoever describes the node."""
        refs = self._outs
        if type(refs) is not list:
            refs = self._outs = [refs]
        out = []
        k = 0
        for i, s in enumerate(self.specs):
            if s is None:
                continue
            v = refs[k]()
            if v is None:
                v = Value(s, self, i)
                refs[k] = weakref.ref(v)
            out.append(v)
            k += 1
        return out


newest: list = [None]
"""The node recorded last (a checkpoint's recompute ties to it: ``lazy/recompute``)."""


def make_node(op, flat: list, tree: tuple, specs: list, const_repr: str,
              location: str | None = None, key: bytes | None = None) -> list[Value]:
    """Record one op; returns its new output Values (the only strong
    references to them: hold them, or they die with nothing computing them).

    ``flat``: the arguments, a ``Value`` for each tensor (the node keeps the
    list: the caller must not change it). ``specs``: the op's flat outputs, a
    TensorSpec for each tensor and None for anything else (an undefined
    gradient, a Python value). ``key``: ``node_key(op, const_repr, specs)``
    when the caller has it memoized."""
    node = newest[0] = Node(op, flat, tree, specs,
                            key if key is not None else node_key(op, const_repr, specs), location)
    if len(specs) == 1 and specs[0] is not None:  # the common case, without comprehensions
        out = Value(specs[0], node, 0)
        node._outs = weakref.ref(out)
        outs = [out]
    else:
        outs = [Value(s, node, i) for i, s in enumerate(specs) if s is not None]
        node._outs = [weakref.ref(v) for v in outs]
    for v in outs:
        if 0 in v.spec.shape:
            # Nothing to compute, and torch-mlir's lowerings of some ops
            # divide by a zero extent (SIGFPE): the value is empty data.
            v.materialize(DeviceData(v.spec, host=torch.empty_strided(
                v.spec.shape, v.spec.stride, dtype=v.spec.dtype)))
    return outs


def planned_node(op, flat: list, tree: tuple, specs: list, key: bytes,
                 location: str | None = None) -> list[Value]:
    """``make_node`` for ``specs`` that hold no empty tensor (a record plan's:
    capture plans no op with an empty output), with its key: the per-op path
    of a repeated step, without make_node's check for empty outputs."""
    node = newest[0] = Node(op, flat, tree, specs, key, location)
    if len(specs) == 1 and specs[0] is not None:
        out = Value(specs[0], node, 0)
        node._outs = weakref.ref(out)
        return [out]
    outs = [Value(s, node, i) for i, s in enumerate(specs) if s is not None]
    node._outs = list(map(weakref.ref, outs))
    return outs


def arg_signature(flat: list) -> tuple:
    """What decides whether an op's lowering compiles: the dtype and rank of
    each tensor argument (``flat`` as a Node holds it) and the constants;
    sizes do not enter, so one failed shape does not retry every size."""
    return tuple((v.spec.dtype, len(v.spec.shape)) if type(v) is Value else repr(v)
                 for v in flat)


def node_key(op, const_repr: str, specs: list) -> bytes:
    """A sha256 over the op, its constant arguments and its output
    signatures. It leaves out the inputs: the graph's key says where each
    comes from (``Graph.build``), so a node's key is the same wherever it
    stands, and a record plan keeps it instead of hashing every op."""
    h = hashlib.sha256(str(op).encode())
    h.update(const_repr.encode())
    for s in specs:
        h.update(s.signature().encode() if s is not None else b"-")
    return h.digest()
