"""Views and their writes at an offset that is a runtime value.

``x[i:i+35]`` reaches capture as ``slice.Tensor(x, 0, i, i+35)``: the start is
a constant, so a graph that slices at a new offset every step (a language
model walking its corpus) is a new graph every step. Capture
(``lazy/offsets.py``) records these ops instead, the offset a 0-dim int64
tensor (a graph input) and the length a constant:

- ``slice_at(self, dim, start, length, step)``: ``self[start : start + (length-1)*step + 1 : step]`` along ``dim``
- ``select_at(self, dim, index)``: ``self.select(dim, index)``
- ``slice_scatter_at(self, src, dim, start, step)``: ``slice_scatter`` of ``src`` (its length)
- ``select_scatter_at(self, src, dim, index)``: ``select_scatter``

The offset must already be in bounds (capture lifts the start PyTorch
clamped and normalized): the ops do not check it. Their outputs have the
shape, strides and dtype of the aten op's (a view's strides, without its
storage offset). Each op's CPU kernel runs a graph eagerly.

``expand_runtime_offsets(gm)`` rewrites them, on the fx graph just before
torch-mlir imports it (after the retrace through the decomposition tables,
whose fake tensors cannot read a value), into the aten ops with the offset
read by ``aten.Int.Tensor``: torch-mlir lowers those to
``tensor.extract_slice``/``insert_slice`` with a dynamic offset and static
sizes (no gather).
"""
from __future__ import annotations

import torch
import torch.fx as fx

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("slice_at(Tensor self, int dim, Tensor start, SymInt length, int step=1) -> Tensor")
_LIB.define("select_at(Tensor self, int dim, Tensor index) -> Tensor")
_LIB.define("slice_scatter_at(Tensor self, Tensor src, int dim, Tensor start, int step=1) "
            "-> Tensor")
_LIB.define("select_scatter_at(Tensor self, Tensor src, int dim, Tensor index) -> Tensor")
ops = torch.ops.lazy_mlir
aten = torch.ops.aten


def _end(start, length, step):
    return start + (length - 1) * step + 1


def _slice_at(self, dim, start, length, step=1):
    s = int(start)
    return aten.slice.Tensor(self, dim, s, _end(s, length, step), step).clone()


def _select_at(self, dim, index):
    return aten.select.int(self, dim, int(index)).clone()


def _slice_scatter_at(self, src, dim, start, step=1):
    s = int(start)
    return aten.slice_scatter.default(self, src, dim, s, _end(s, src.shape[dim], step), step)


def _select_scatter_at(self, src, dim, index):
    return aten.select_scatter.default(self, src, dim, int(index))


def _slice_at_shape(self, dim, start, length, step=1):
    shape, stride = list(self.shape), list(self.stride())
    shape[dim], stride[dim] = length, stride[dim] * step
    return self.new_empty_strided(shape, stride)


def _select_at_shape(self, dim, index):
    shape, stride = list(self.shape), list(self.stride())
    del shape[dim], stride[dim]
    return self.new_empty_strided(shape, stride)


def _slice_scatter_at_shape(self, src, dim, start, step=1):
    return aten.slice_scatter.default(self, src, dim, 0, _end(0, src.shape[dim], step), step)


def _select_scatter_at_shape(self, src, dim, index):
    return aten.select_scatter.default(self, src, dim, 0)


for _name, _kernel, _shape in (("slice_at", _slice_at, _slice_at_shape),
                               ("select_at", _select_at, _select_at_shape),
                               ("slice_scatter_at", _slice_scatter_at, _slice_scatter_at_shape),
                               ("select_scatter_at", _select_scatter_at,
                                _select_scatter_at_shape)):
    _LIB.impl(_name, _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shape, lib=_LIB)

RUNTIME_OFFSET_OPS = frozenset({ops.slice_at.default, ops.select_at.default,
                                ops.slice_scatter_at.default, ops.select_scatter_at.default})


def expand_runtime_offsets(gm: fx.GraphModule) -> fx.GraphModule:
    """Each op of ``RUNTIME_OFFSET_OPS`` as its aten op on an offset read
    with ``aten.Int.Tensor`` (one read per offset node); returns ``gm``,
    rewritten in place (untouched when it has none)."""
    g = gm.graph
    nodes = [n for n in g.nodes if n.op == "call_function" and n.target in RUNTIME_OFFSET_OPS]
    if not nodes:
        return gm
    reads: dict = {}  # offset node -> its Int.Tensor node

    def read(offset: fx.Node) -> fx.Node:
        if offset not in reads:
            with g.inserting_after(offset):
                reads[offset] = g.call_function(aten.Int.Tensor, (offset,))
            reads[offset].meta["val"] = 0  # (any int: the importer types it !torch.int)
        return reads[offset]

    for node in nodes:
        target, args = node.target, list(node.args)
        with g.inserting_before(node):
            if target is ops.select_at.default:
                self, dim, index = args
                new = g.call_function(aten.select.int, (self, dim, read(index)))
            elif target is ops.select_scatter_at.default:
                self, src, dim, index = args
                new = g.call_function(aten.select_scatter.default, (self, src, dim, read(index)))
            else:
                new = _slice_node(g, target, args, node.kwargs, read)
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        g.erase_node(node)
    gm.recompile()
    return gm


def _slice_node(g: fx.Graph, target, args, kwargs, read) -> fx.Node:
    """The ``slice.Tensor``/``slice_scatter`` node of a ``slice_at`` or a
    ``slice_scatter_at`` node (inserted where ``g`` inserts)."""
    step = kwargs.get("step", 1)
    if target is ops.slice_at.default:
        self, dim, start, length, *rest = args
        src = None
    else:
        self, src, dim, start, *rest = args
        length = src.meta["val"].shape[dim]
    step = rest[0] if rest else step
    s = read(start)
    if isinstance(length, fx.Node):  # a dynamic dimension's (pipeline/size_family.py)
        less = g.call_function(aten.sub.int, (length, 1))
        strided = g.call_function(aten.mul.int, (less, step))
        extent = g.call_function(aten.add.int, (strided, 1))
        for n in (less, strided, extent):
            n.meta["val"] = 0
    else:
        extent = (length - 1) * step + 1
    end = g.call_function(aten.add.int, (s, extent))
    end.meta["val"] = 0
    if src is None:
        return g.call_function(aten.slice.Tensor, (self, dim, s, end, step))
    return g.call_function(aten.slice_scatter.default, (self, src, dim, s, end, step))
