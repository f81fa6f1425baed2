"""An ``as_strided`` across a ``view(dtype)``, made importable.

FxImporter rewrites each ``as_strided`` as an ``index`` into the tensor that
made its storage (``torch_mlir/extras/fx_as_strided.py``: it follows shared
storage back through view ops, ``view(dtype)`` included). Where that tensor
has another dtype than the ``as_strided``'s input, the index reads its
elements, not the reinterpreted ones, and the linalg of it fails
verification ("type of yield operand 1 ('f32') doesn't match the element
type ... ('i32')"): an as_strided of a ``view(int32)`` of a float32
argument (a torch.compile graph, fuzzer seed 800193), or of a float64
storage last written through its ``view(int64)`` (an lm.jit graph, seed
801059) ran eagerly.

``fresh_dtype_bases`` reads an ``as_strided`` from the tensor that made
its storage where that has its dtype (the importer's walk stops at the
outputs of a ``split``, and found no element past them: seed 801220), and
otherwise from that tensor flat, viewed as the input's dtype (up to its
last whole element) and cloned, so that the importer's walk stops there.
The addresses are the same: the same storage, or a copy of it from its
start (only for a contiguous tensor at offset 0; else left as it is).
"""
from __future__ import annotations

import contextlib

import torch
from torch import fx

aten = torch.ops.aten


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _storage_source(node: fx.Node) -> fx.Node:
    """The node whose result made ``node``'s storage: an argument of a view
    op sharing its storage, followed back, through the outputs of a
    ``split``/``chunk``/``unbind`` too (the importer's own walk stops at
    their ``getitem``: fuzzer seed 801220)."""
    storage = _val(node).untyped_storage()

    def shares(a) -> bool:
        v = _val(a)
        vs = v if isinstance(v, (list, tuple)) else [v]
        return any(isinstance(t, torch.Tensor) and t.untyped_storage() is storage for t in vs)
    found = node
    while True:
        flat, _ = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
        up = next((a for a in flat if isinstance(a, fx.Node) and shares(a)), None)
        if up is None:
            return found
        node = up
        if isinstance(_val(node), torch.Tensor):
            found = node


def _node(graph: fx.Graph, op, args, val) -> fx.Node:
    n = graph.call_function(op, args)
    n.meta["val"] = val
    return n


def _read_from(node: fx.Node, base: fx.Node, xv) -> None:
    """``node`` (an ``as_strided`` of a tensor like ``xv``) reading ``base``."""
    args = list(node.args)
    if len(args) < 4 and "storage_offset" not in node.kwargs:
        args.append(xv.storage_offset())  # (the default is the input's own offset)
    args[0] = base
    node.args = tuple(args)


def fresh_dtype_bases(gm: fx.GraphModule) -> bool:
    """Rewrite (see the module's docstring); True when the graph changed."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not aten.as_strided.default:
            continue
        x = node.args[0]
        xv = _val(x)
        if not isinstance(xv, torch.Tensor):
            continue
        base = _storage_source(x)
        bv = _val(base)
        if base is x:
            continue
        if bv.dtype == xv.dtype:  # (the same storage, addressed the same: read it there)
            _read_from(node, base, xv)
            changed = True
            continue
        if bv.storage_offset() or not bv.is_contiguous() \
                or bv.dtype.is_complex or xv.dtype.is_complex or bv.numel() == 0:
            continue
        ratio = xv.element_size() // bv.element_size()
        whole = bv.numel() - bv.numel() % ratio if ratio > 1 else bv.numel()
        if whole == 0:
            continue
        mode = getattr(bv, "fake_mode", None)
        with gm.graph.inserting_before(node), (mode or contextlib.nullcontext()):
            flat_v = bv.reshape(-1)
            flat = _node(gm.graph, aten.view.default, (base, [-1]), flat_v)
            if whole != bv.numel():
                flat_v = flat_v[:whole]
                flat = _node(gm.graph, aten.slice.Tensor, (flat, 0, 0, whole), flat_v)
            as_dtype_v = flat_v.view(xv.dtype)
            as_dtype = _node(gm.graph, aten.view.dtype, (flat, xv.dtype), as_dtype_v)
            fresh = _node(gm.graph, aten.clone.default, (as_dtype,), as_dtype_v.clone())
        _read_from(node, fresh, xv)
        changed = True
    if changed:
        gm.graph.lint()
        gm.recompile()
    return changed

