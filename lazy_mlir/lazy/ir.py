"""Graph nodes of captured programs.

A ``Value`` is one tensor of the graph: either an output of a ``Node`` still to
be computed, or device data (``DeviceData``) that already exists. When a graph
runs, its outputs become device data in place (``Value.materialize``): later
graphs stop there and take them as inputs, and the nodes behind are freed.

Every node's key (sha256 over op, constant arguments and its inputs' keys) is
computed once, at creation; device data is keyed by shape and dtype only, so
keys are stable across processes and independent of tensor contents.
"""
from __future__ import annotations

import hashlib
import weakref
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Shape, strides, storage offset and dtype of a tensor (no data)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSpec":
        return TensorSpec(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)

    def meta(self) -> torch.Tensor:
        """A meta tensor with exactly this layout (a view of a meta storage)."""
        if self.offset == 0 and _is_contiguous(self.shape, self.stride):
            return torch.empty(self.shape, dtype=self.dtype, device="meta")
        extent = 1 + self.offset + sum((s - 1) * st for s, st in zip(self.shape, self.stride) if s)
        base = torch.empty(max(extent, 1), dtype=self.dtype, device="meta")
        return base.as_strided(self.shape, self.stride, self.offset)

    def signature(self) -> str:
        """``float32[2, 3]``: shape and dtype, the part of a spec keys use."""
        key = (self.shape, self.dtype)
        sig = _SIGNATURES.get(key)
        if sig is None:
            sig = _SIGNATURES[key] = f"{str(self.dtype)[6:]}{list(self.shape)}"
        return sig


_SIGNATURES: dict = {}


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
        live_data.add(self)

    def wait(self) -> None:
        """Block until computed; re-raise the error of the graph that failed."""
        f = self.future
        if f is not None:
            f.result()
            self.future = None


# Every DeviceData alive (a test counts them to prove dead buffers are freed).
live_data: "weakref.WeakSet[DeviceData]" = weakref.WeakSet()


class Value:
    """One tensor of a graph: node output (pending) or device data (done)."""

    __slots__ = ("node", "index", "data", "spec", "key", "__weakref__")

    def __init__(self, spec: TensorSpec, node: "Node | None" = None, index: int = 0,
                 data: DeviceData | None = None):
        self.spec = spec
        self.node = node
        self.index = index
        self.data = data
        if node is not None:
            self.key = node.key + index.to_bytes(2, "little")
        else:
            self.key = b"D" + spec.signature().encode()

    @property
    def pending(self) -> bool:
        return self.data is None

    def materialize(self, data: DeviceData) -> None:
        """Bind computed data; drop the node so its graph can be freed."""
        self.data = data
        self.node = None
        self.key = b"D" + self.spec.signature().encode()

    @staticmethod
    def of_data(data: DeviceData) -> "Value":
        return Value(data.spec, data=data)


class Node:
    """One captured aten op. ``flat`` (its arguments flattened by ``argtree``,
    with ``tree`` to rebuild them) holds a ``Value`` where the op took a
    tensor; everything else is a constant baked into the key."""

    __slots__ = ("op", "flat", "tree", "inputs", "outputs", "key", "location")

    def __init__(self, op, flat: list, tree: tuple, inputs: list[Value], specs: list,
                 const_repr: str, location: str | None = None):
        """``specs``: the op's flat outputs, a TensorSpec for each tensor and
        None for anything else (an undefined gradient, a Python value)."""
        self.op = op
        self.flat = flat
        self.tree = tree
        self.inputs = inputs
        self.location = location
        h = hashlib.sha256(str(op).encode())
        h.update(const_repr.encode())
        for v in inputs:
            h.update(v.key)
        for s in specs:
            h.update(s.signature().encode() if s is not None else b"-")
        self.key = h.digest()
        self.outputs = [Value(s, self, i) for i, s in enumerate(specs) if s is not None]
        for v in self.outputs:
            if 0 in v.spec.shape:
                # Nothing to compute, and torch-mlir's lowerings of some ops
                # divide by a zero extent (SIGFPE): the value is empty data.
                v.materialize(DeviceData(v.spec, host=torch.empty_strided(
                    v.spec.shape, v.spec.stride, dtype=v.spec.dtype)))
