"""Empty tensors in a torch.compile graph: computed without the compiler.

The lazy device never compiles an op on empty tensors (``lazy/empty_inputs``:
an empty result is bound to empty data, a non-empty result of empty inputs is
folded at capture). A Dynamo graph reached torch-mlir and IREE with them, and
they get them wrong: ``tensor.extract_slice`` of a 0-sized dimension fails
IREE's verifier (an ``unbind`` of a (0, 2, 0) slice, fuzzer seed 800199), a
``slice_scatter`` of no elements fails ``tm_tensor.scatter`` (an in-place add
into an empty unfold of an argument, seed 800176), a matmul over a 0-long
inner dimension fails to compile (seed 800216); each graph ran eagerly.

``fold_empty`` rewrites the traced graph before it is lowered, as the lazy
device records: a node whose result is empty becomes an ``empty`` of its
shape (nothing to compute; not a view of elements an ``as_strided`` may
address); a scatter of no elements into a tensor is that
tensor; a node whose tensor inputs are all empty and whose result is not
(``mm`` of (1, 0) by (0, 1), ``sum`` of nothing) is computed by ATen on empty
host tensors at compile time and becomes a ``full`` of its one value (left as
it is when its elements differ).
"""
from __future__ import annotations

import operator

import torch
from torch import fx

aten = torch.ops.aten

# Scatters whose result is their first argument when what they write is
# empty (``index_put`` of no indices, ``index_add`` of no rows, ...): the
# argument that holds the written elements.
_WRITTEN = {
    aten.slice_scatter.default: "src", aten.select_scatter.default: "src",
    aten.as_strided_scatter.default: "src", aten.diagonal_scatter.default: "src",
    aten.index_put.default: "values", aten.index_copy.default: "source",
    aten.index_add.default: "source", aten.scatter.src: "src", aten.scatter_add.default: "src",
    aten.scatter_reduce.two: "src", aten.index_reduce.default: "source",
}


def _val(n):
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def _is_empty(v) -> bool:
    return isinstance(v, torch.Tensor) and v.numel() == 0


def _tensor_args(node: fx.Node) -> list:
    flat, _ = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    return [a for a in flat if isinstance(_val(a), torch.Tensor)]


def _replace(gm: fx.GraphModule, node: fx.Node, target, args, kwargs=None) -> None:
    with gm.graph.inserting_before(node):
        new = gm.graph.call_function(target, args, kwargs or {})
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)


def _empty(gm, node, val) -> None:
    _replace(gm, node, aten.empty.memory_format, (list(val.shape),),
             {"dtype": val.dtype, "device": torch.device("cpu")})


def _unchanged(node: fx.Node):
    """The tensor a scatter of no elements returns, or None."""
    name = _WRITTEN.get(node.target)
    if name is None:
        return None
    schema = node.target._schema
    bound = dict(zip([a.name for a in schema.arguments], node.args), **node.kwargs)
    written = bound.get(name)
    indices = bound.get("indices") if node.target is aten.index_put.default else ()
    if _is_empty(_val(written)) or any(_is_empty(_val(i)) for i in indices or ()):
        base = node.args[0]
        if _val(base) is not None and _val(base).shape == _val(node).shape:
            return base
    return None


def _folded(node: fx.Node):
    """The one value of ``node``'s result computed by ATen from its empty
    inputs, or None (inputs not all empty, random, elements that differ, an
    op ATen refuses: the compiler is then left the node)."""
    op = node.target
    if not deterministic(op):
        return None
    ins = _tensor_args(node)
    if not ins or not all(_is_empty(_val(a)) for a in ins):
        return None

    def host(a):
        v = _val(a)
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype) \
            if isinstance(v, torch.Tensor) else a
    args, kwargs = torch.utils._pytree.tree_map(host, (node.args, node.kwargs))
    try:
        out = op(*args, **kwargs)
    except Exception:  # noqa: BLE001 - eager's own error: the compiled graph's business
        return None
    return splat_value(out)


def deterministic(op) -> bool:
    """An ATen op that ATen may compute at compile time: not random, not in place."""
    schema = getattr(op, "_schema", None)
    return (schema is not None and not schema.is_mutable
            and torch.Tag.nondeterministic_seeded not in op.tags)


def splat_value(out) -> float | int | bool | None:
    """The one value of every element of ``out`` (NaN too), or None."""
    if not isinstance(out, torch.Tensor) or out.numel() == 0:
        return None
    first = out.reshape(-1)[0]
    same = (out == first) | (out != out) & (first != first)
    return first.item() if bool(same.all()) else None


def replace_by_full(gm: fx.GraphModule, node: fx.Node, shape, value, dtype) -> None:
    """``node``'s uses read a ``full`` of ``value`` instead (a host tensor's
    device: graphs are traced on the CPU)."""
    _replace(gm, node, aten.full.default, (list(shape), value),
             {"dtype": dtype, "device": torch.device("cpu")})


def _feeding_as_strided(gm: fx.GraphModule) -> set:
    """The nodes an ``as_strided`` reads through (its input, and theirs):
    an empty view after the last one on a path (seed 900521's
    ``as_strided(...).narrow(0, 1, 0)``) is no longer on its way."""
    found: set = set()
    stack = [n for n in gm.graph.nodes if n.target is aten.as_strided.default]
    while stack:
        node = stack.pop()
        for a in node.all_input_nodes:
            if a not in found:
                found.add(a)
                stack.append(a)
    return found


def fold_empty(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with no computation on empty tensors (the module's docstring)."""
    changed = False
    # (an as_strided addresses the storage: an empty view on its way keeps it)
    strided = _feeding_as_strided(gm)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not node.users:
            continue
        val = _val(node)
        if not isinstance(val, torch.Tensor):
            continue
        is_op = isinstance(node.target, torch._ops.OpOverload)
        if not is_op and node.target is not operator.getitem:
            continue
        if is_op and node.target._schema.is_mutable:
            continue  # (a write into an argument keeps its node)
        if val.numel() == 0:
            if node.target is not aten.empty.memory_format and not (
                    node in strided and val.untyped_storage().nbytes()):
                _empty(gm, node, val)
                changed = True
            continue
        if not is_op:
            continue
        base = _unchanged(node)
        if base is not None:
            node.replace_all_uses_with(base)
            changed = True
            continue
        value = _folded(node)
        if value is not None:
            replace_by_full(gm, node, val.shape, value, val.dtype)
            changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return gm
