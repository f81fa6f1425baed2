"""The captured graph as a ``torch.fx.GraphModule``: the first stage.

Each input becomes a placeholder, each node a ``call_function`` of its aten
op, multi-output ops are unpacked with ``getitem``; every node carries
``meta["val"]`` (a fake tensor) as torch-mlir's FxImporter expects.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from ..graph.argtree import unflatten
from ..ops import subgraph
from ..graph.program import Graph
from ..graph.ir import Value


_SUBGRAPH = subgraph.ops.subgraph.default


def to_fx(graph: Graph) -> fx.GraphModule:
    g = fx.Graph()
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    env: dict[int, fx.Node] = {}  # id(Value or DeviceData) -> fx node producing it

    def fake(spec):
        # (made directly, not by empty_strided under the mode: a fifth of the
        # time, and every node of a graph of a new size pays it)
        meta = torch.empty_strided(spec.shape, spec.stride, dtype=spec.dtype, device="meta")
        return FakeTensor(mode, meta, _CPU)

    for i, data in enumerate(graph.inputs):
        p = g.placeholder(f"arg{i}")
        p.meta["val"] = fake(data.spec)
        env[id(data)] = p

    def lookup(v):
        return resolve(env, v)

    for node in graph.nodes:
        if node.op is _SUBGRAPH:  # its template's nodes, spliced in
            inputs, key = node.flat[:-1], node.flat[-1]
            outs = subgraph.inline(g, key, [lookup(a) for a in inputs])
            for v in node.outputs:
                env[id(v)] = outs[v.index]
                outs[v.index].meta["val"] = fake(v.spec)
            continue
        args, kwargs = unflatten([lookup(a) for a in node.flat], node.tree)
        call = g.call_function(node.op, tuple(args), dict(kwargs))
        outs = node.outputs
        if _returns_single_tensor(node.op):
            call.meta["val"] = fake(outs[0].spec)
            env[id(outs[0])] = call
        else:
            n = len(node.op._schema.returns) if not _returns_list(node.op) else len(outs)
            vals = [None] * max(n, 1 + max((v.index for v in outs), default=-1))
            for v in outs:
                item = g.call_function(operator.getitem, (call, v.index))
                item.meta["val"] = vals[v.index] = fake(v.spec)
                env[id(v)] = item
            call.meta["val"] = vals if _returns_list(node.op) else tuple(vals)
    g.output(tuple(lookup(v) for v in graph.outputs))
    return fx.GraphModule(torch.nn.Module(), g)


def resolve(env: dict, v):
    """What stands for ``v`` in ``env`` (id of a Value or its input data ->
    an fx node in ``to_fx``, a tensor in ``eager_graph``); a device is the
    CPU (graphs are traced and run on the host); anything else as it is."""
    if isinstance(v, Value):
        if v.data is not None and id(v.data) in env:
            return env[id(v.data)]
        return env[id(v)]
    if isinstance(v, torch.device):
        return _CPU
    return v


_CPU = torch.device("cpu")


def decompose(gm: fx.GraphModule, extra: dict | None = None,
              base: bool = True) -> fx.GraphModule:
    """Re-trace ``gm`` through torch-mlir's recommended decomposition table
    (core aten decompositions minus those torch-mlir lowers better itself,
    the table ``torch_mlir.fx.export_and_import`` applies) and ours (unless
    ``base`` is false), then ``extra`` (which wins; where an ``extra`` entry
    returns ``NotImplemented``, the base table's entry for the op applies)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..ops.support import decomposition_table
    table = dict(decomposition_table()) if base else {}
    for op, fn in (extra or {}).items():
        table[op] = _first_implemented(fn, table[op]) if op in table else fn
    from ..passes.dtype_views import fold_view_dtype_chains
    fold_view_dtype_chains(gm)  # (before the table's bool_bytes reads one view of a chain)
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = fakes[0].fake_mode if fakes else FakeTensorMode()
    foreach = any(n.op == "call_function" and getattr(n.target, "__name__", "").startswith(
        "_foreach_") for n in gm.graph.nodes)
    with mode:
        out = make_fx(gm, decomposition_table=table)(*fakes)
    _keep_output_dtypes(out, [_dtype(n.meta.get("val")) for n in _outputs(gm)[1]])
    return schedule_by_outputs(out) if foreach else out


def _outputs(gm: fx.GraphModule) -> tuple[fx.Node, list]:
    """``gm``'s output node and what it returns, as a list."""
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    returned = output.args[0]
    return output, list(returned) if isinstance(returned, (list, tuple)) else [returned]


def _dtype(val):
    return val.dtype if isinstance(val, torch.Tensor) else None


def _keep_output_dtypes(gm: fx.GraphModule, dtypes: list) -> None:
    """Convert each output of the decomposed ``gm`` whose dtype a
    decomposition changed back to the recorded one (``dtypes``): the module's
    buffers must have the dtypes the graph recorded, or the next graph given
    one raises "element type mismatch" (fuzzer seed 940125: a float16
    ``where`` computed and returned as float32 by a promotion of ours)."""
    output, flat = _outputs(gm)
    convert = torch.ops.prims.convert_element_type.default
    changed = False
    for i, (node, want) in enumerate(zip(flat, dtypes)):
        if not isinstance(node, fx.Node) or want is None or _dtype(node.meta.get("val")) == want:
            continue
        with gm.graph.inserting_before(output):
            flat[i] = gm.graph.call_function(convert, (node, want))
        flat[i].meta["val"] = convert(node.meta["val"], want)
        changed = True
    if changed:
        returned = output.args[0]
        output.args = (type(returned)(flat) if isinstance(returned, (list, tuple)) else flat[0],)
        gm.recompile()


def schedule_by_outputs(gm: fx.GraphModule) -> fx.GraphModule:
    """The same graph, its nodes in depth-first post-order from each output
    in turn.

    A foreach node (one node for a whole optimizer step's list, see
    ``ops/foreach.py``) expands into its per-tensor ops side by side: every
    parameter's 0-dim bias-correction ops end up adjacent, IREE forms one
    scalar dispatch of them all, and past 64 buffers (28 parameters) the
    module fails to load. Scheduled per output, each parameter's chain
    stands beside the tensor ops that use it, as when captured per element.
    The graph is functional (make_fx's output), so any topological order
    computes the same values."""
    g = gm.graph
    nodes = list(g.nodes)
    if any(n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
           and n.target._schema.is_mutable for n in nodes):
        return gm  # (an order of writes to keep: leave it)
    output = nodes[-1]
    order: list = [n for n in nodes if n.op == "placeholder"]
    seen = set(order)
    for root in output.all_input_nodes:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in seen:
                continue
            if expanded:
                seen.add(node)
                order.append(node)
                continue
            stack.append((node, True))
            for arg in reversed(node.all_input_nodes):
                if arg not in seen:
                    stack.append((arg, False))
    new = fx.Graph()
    env: dict = {}
    for node in order + [output]:
        env[node] = new.node_copy(node, lambda n: env[n])
    return fx.GraphModule(gm, new)


def _first_implemented(first, second):
    """``first``, or ``second`` where ``first`` returns ``NotImplemented``."""
    def run(*args, **kwargs):
        out = first(*args, **kwargs)
        return second(*args, **kwargs) if out is NotImplemented else out
    return run


def _returns_single_tensor(op) -> bool:
    rets = op._schema.returns
    return len(rets) == 1 and isinstance(rets[0].type, torch.TensorType)


def _returns_list(op) -> bool:
    rets = op._schema.returns
    return len(rets) == 1 and not isinstance(rets[0].type, torch.TensorType)
