"""An aot graph's writes into its inputs, done by the backend after the call.

The Dynamo backend asks aot_autograd to keep data-only input mutations in
the graph (``keep_inference_input_mutations=True``): the optimizer's graph
then ends in one ``copy_(param, new_value)`` per parameter and state tensor
instead of returning 112 new values (GPT-2 tiny) that aot_autograd's
epilogue copies into the inputs one Python ``copy_`` at a time.

``defer_input_writes(gm)`` takes those ``copy_`` nodes out of the graph and
returns their values as extra results, so the module compiled from it is
functional; ``WritesBack`` runs that graph and copies the extra results into
their inputs after each call (compiled or eager). A large input that nothing
else shares takes the compiled result's memory instead of a copy
(``_takes_over``); the rest are copied with one ``torch._foreach_copy_``.
A later read of a written input in the graph reads the written
value instead (the same dtype and shape), so deferring the write changes
nothing. A graph that writes its inputs otherwise (``set_``, a ``copy_``
whose later readers would see a conversion) runs eagerly as it is.
"""
from __future__ import annotations

import torch
import torch.fx as fx

from .. import metrics
from ..lazy.kinds import written_args

_COPY = torch.ops.aten.copy_.default


def defer_input_writes(gm: fx.GraphModule):
    """(gm, targets): ``gm`` rewritten without its ``copy_`` into inputs,
    returning after its own results the value written into each input of
    ``targets`` (placeholder indices, in the order the writes must be made);
    ``(gm, ())`` unchanged where it writes none; None where it writes an
    input in a way this cannot defer."""
    places = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    order = {n: k for k, n in enumerate(gm.graph.nodes)}
    writes: dict[fx.Node, fx.Node] = {}  # placeholder -> its last written value, in write order
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not _COPY or node.args[0] not in places:
            continue
        dest, value = node.args[0], node.args[1]
        if not isinstance(value, fx.Node) or node.kwargs.get("non_blocking") or len(node.args) > 2:
            return None
        later = [u for u in dest.users if u is not node and order[u] > order[node]]
        if (later or node.users) and not _same_layout(dest, value):
            return None  # (readers of the written input would see a conversion)
        for user in later:  # (each reads the value written, as it would in place)
            user.replace_input_with(dest, value)
        node.replace_all_uses_with(value)
        gm.graph.erase_node(node)
        writes.pop(dest, None)
        writes[dest] = value
    if _writes_placeholder(gm, places):
        return None
    if not writes:
        return gm, ()
    out = gm.graph.output_node()
    results = out.args[0]
    results = list(results) if isinstance(results, (tuple, list)) else [results]
    out.args = (tuple(results + list(writes.values())),)
    gm.graph.lint()
    gm.recompile()
    return gm, tuple(places[p] for p in writes)


def _same_layout(a: fx.Node, b: fx.Node) -> bool:
    va, vb = a.meta.get("val"), b.meta.get("val")
    return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor)
            and va.dtype == vb.dtype and str(tuple(va.shape)) == str(tuple(vb.shape)))


def _writes_placeholder(gm: fx.GraphModule, places) -> bool:
    """Whether a node left in ``gm`` writes into one of its inputs (an
    argument its schema writes, ``lazy.kinds.written_args``, is one, or a
    list holding one)."""
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        names = written_args(node.target)
        if not names:
            continue
        bound = dict(zip((a.name for a in node.target._schema.arguments), node.args))
        bound.update(node.kwargs)
        for name in names:
            value = bound.get(name)
            values = value if isinstance(value, (list, tuple)) else (value,)
            if any(isinstance(v, fx.Node) and v in places for v in values):
                return True
    return False


TAKE_OVER_MIN_BYTES = 1 << 16
"""Below this, a copy costs less than the checks that could spare it."""


class WritesBack:
    """Runs ``inner`` (a boxed runner of the rewritten graph) and writes its
    last ``len(targets)`` results into the arguments ``targets``: a large
    one takes over the result's memory where ``_takes_over`` allows (a
    tiny GPT-2-sized MLP's AdamW step copied 22 MB a step, 3.3 of 20 ms),
    the others are copied."""

    _boxed_call = True

    def __init__(self, inner, targets: tuple[int, ...]):
        self.inner = inner
        self.targets = targets

    def __call__(self, args):
        dests = [args[i] for i in self.targets]
        results = self.inner(args)  # (clears args)
        n = len(results) - len(dests)
        values = results[n:]
        del results[n:]
        with torch.no_grad():  # (a leaf that requires grad refuses an in-place write)
            copies = _take_over(dests, values, results)
            if copies:
                torch._foreach_copy_(*copies)
        return results


def _take_over(dests: list, values: list, others: list):
    """``set_`` each dest that may take its value's memory (``_takes_over``);
    the (dests, values) left to copy, or None."""
    left_d, left_v = [], []
    taken = 0
    ptrs = None
    for dest, value in zip(dests, values):
        if value.nbytes >= TAKE_OVER_MIN_BYTES and _takes_over(dest, value):
            if ptrs is None:  # (two results over one memory: neither is taken over)
                ptrs = _result_addresses(values, others)
            if ptrs.get(value.data_ptr()) == 1:
                try:
                    dest.set_(value)
                except RuntimeError:  # (an inference tensor, ...): copied
                    pass
                else:
                    _remark(dest)
                    taken += value.nbytes
                    continue
        left_d.append(dest)
        left_v.append(value)
    if taken:
        metrics.counter_inc("DynamoWritesTakenOver", taken)
    return (left_d, left_v) if left_d else None


def _takes_over(dest: torch.Tensor, value: torch.Tensor) -> bool:
    """Whether ``dest`` may hold ``value``'s memory from now on instead of a
    copy of it, as no one can tell apart: ``value`` was read from a module
    of ours (``aot_graph._mark_made``, unwritten since) into memory of its
    own; ``dest`` is a plain tensor of the same layout, the only one over
    its memory (no view, ``detach()``, ``.data`` or held ``state_dict()``
    entry shares it: they would keep the old values) and not in shared
    memory (another process reads it: Hogwild)."""
    if type(dest) not in _PLAIN or type(value) is not torch.Tensor:
        return False
    storage = value.untyped_storage()
    made = getattr(storage, "_lazy_mlir_array", None)
    return (made is not None and made[1] == value._version
            and storage.nbytes() == value.nbytes and value.storage_offset() == 0
            and value.dtype == dest.dtype and value.shape == dest.shape
            and value.stride() == dest.stride() and dest.device == value.device
            and dest.storage_offset() == 0 and not dest.is_shared()
            and _alone(dest) and _alone(value))


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _alone(t: torch.Tensor) -> bool:
    """Whether no other tensor shares ``t``'s storage (its use count: ``t``
    and the storage's Python object)."""
    return torch._C._storage_Use_Count(t.untyped_storage()._cdata) <= 2


def _result_addresses(values: list, others: list) -> dict:
    """How many results start at each address (memory that DLPack shares
    is invisible to use counts)."""
    count: dict = {}
    for t in (*values, *others):
        if isinstance(t, torch.Tensor) and t.numel():
            p = t.data_ptr()
            count[p] = count.get(p, 0) + 1
    return count


def _remark(dest: torch.Tensor) -> None:
    """Keep the module's array on the storage ``dest`` took over, at
    ``dest``'s version: the next graph reads ``dest`` without an import."""
    storage = dest.untyped_storage()
    made = storage._lazy_mlir_array
    storage._lazy_mlir_array = (made[0], dest._version, *made[2:])


class RunsEagerly:
    """A graph that writes its inputs in a way ``defer_input_writes`` cannot
    take out: run as it is, on the host, every call (``DynamoEagerGraph``)."""

    _boxed_call = True

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm

    def __call__(self, args):
        metrics.counter_inc("DynamoEagerGraph")
        out = self.gm(*args)
        args.clear()
        return list(out) if isinstance(out, (tuple, list)) else [out]
