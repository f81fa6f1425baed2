"""``lazy_mlir::subgraph``: a whole aten fx graph recorded as ONE node.

Capture records an op per ``__torch_dispatch__`` call, and on small models
that Python call is most of a step (the backward alone is ~45% of GPT-2
tiny's capture). Where the same aten graph runs every step (the backward,
captured by PyTorch's compiled autograd: ``lazy/backward.py``), it is traced
once into a ``Template`` and each later step records one ``subgraph`` node
naming it; ``pipeline/fx_graph.to_fx`` splices the template's nodes in its
place, so compile workers and the import see plain aten ops and the graph
key (the template's content hash) is the same in every process.

A template is functional aten (``make_fx`` of a functionalized function),
its devices rewritten to the CPU as ``to_fx`` does for captured nodes, and
its outputs never alias its inputs (the node's outputs are new storages).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch
import torch.fx as fx

from .registry import IMPORT, register_decomposition

_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")
_LIB.define("subgraph(Tensor[] inputs, str key) -> Tensor[]")
ops = torch.ops.lazy_mlir


@dataclass(frozen=True)
class Template:
    """An aten graph of ``len(inputs)`` tensors to ``len(outputs)`` ones."""

    key: str
    gm: fx.GraphModule
    inputs: tuple  # (shape, stride, dtype) of each input
    outputs: tuple  # (shape, stride, dtype) of each output


TEMPLATES: dict[str, Template] = {}


def _layout(t: torch.Tensor) -> tuple:
    return tuple(t.shape), tuple(t.stride()), t.dtype


def _on_cpu(gm: fx.GraphModule) -> None:
    """Device constants (factory ops' ``device=``) and the nodes' fake
    values become the CPU: the pipeline traces every graph on CPU fake
    tensors (``to_fx``), and a template traced on lazy device fakes is
    spliced into it with its nodes' metadata."""
    from torch._subclasses.fake_tensor import FakeTensor
    cpu = torch.device("cpu")

    def fix(a):
        return cpu if isinstance(a, torch.device) else a

    def fix_val(v):
        if isinstance(v, FakeTensor) and v.device.type != "cpu":
            meta = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            return FakeTensor(v.fake_mode, meta, cpu)
        return v
    for node in gm.graph.nodes:
        node.args = fx.node.map_aggregate(node.args, fix)
        node.kwargs = fx.node.map_aggregate(node.kwargs, fix)
        if "val" in node.meta:
            node.meta["val"] = fx.node.map_aggregate(node.meta["val"], fix_val)
    gm.recompile()


def _fake_like(mode, t: torch.Tensor):
    """A fake tensor of ``t``'s layout on ``t``'s device (a lazy device one
    too: autograd's formulas check devices while being traced)."""
    from torch._subclasses.fake_tensor import FakeTensor
    meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return FakeTensor(mode, meta, t.device)


def make_template(fn, example_inputs: list[torch.Tensor]) -> Template:
    """Trace ``fn(*tensors) -> tuple of tensors`` on fake tensors shaped
    like ``example_inputs`` into a registered ``Template``. Raises where
    ``fn`` is not traceable (the caller runs it op by op instead)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes = [_fake_like(mode, t) for t in example_inputs]
    gm, outs = trace(fn, fakes, mode)
    return register(gm, tuple(_layout(t) for t in fakes), tuple(_layout(o) for o in outs))


def trace(fn, fakes: list, mode, on_cpu: list | None = None) -> tuple[fx.GraphModule, tuple]:
    """``fn(*fakes)`` traced under fake ``mode`` to functional aten on the
    CPU, and its outputs (fake tensors with eager's layouts). With
    ``on_cpu`` (``fakes`` of symbolic sizes, on the CPU), through the
    symbolic decompositions too, and functionalized in a second trace of
    those: PyTorch's functionalization of a view of a lazy device tensor
    runs the view's C++ meta kernel too (as for XLA), which refuses
    symbolic sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from .symbolic import SYMBOLIC_DECOMPOSITIONS
    decomposed: list = []
    table = {**_capture_table(), **(SYMBOLIC_DECOMPOSITIONS if on_cpu is not None else {})}
    table = {op: _noting(fn, decomposed) for op, fn in table.items()}

    def fresh(*args):
        # An output that is an input would be the node's input: a copy.
        return tuple(o.clone() if any(o is a for a in args) else o for o in fn(*args))
    with mode:
        if on_cpu is None:
            gm = make_fx(torch.func.functionalize(fresh, remove="mutations"),
                         decomposition_table=table, pre_dispatch=False)(*fakes)
        else:
            gm = make_fx(fresh, decomposition_table=table, pre_dispatch=False)(*fakes)
            _on_cpu(gm)
            gm = make_fx(torch.func.functionalize(gm, remove="mutations"),
                         pre_dispatch=False)(*on_cpu)
        if any(_mutates(n) for n in gm.graph.nodes):
            # A kernel run below functionalization (compiled autograd's
            # SiLU backward: ``empty_like``, ``fill_``, ``sub_``) recorded
            # in-place ops; a second pass sees them as calls and removes
            # them (torch-mlir refuses ``copy_`` on value tensors).
            gm = make_fx(torch.func.functionalize(gm, remove="mutations"),
                         pre_dispatch=False)(*(on_cpu or fakes))
        # eager's layouts, unless an op was decomposed (its meta kernel may
        # refuse these inputs): then the traced graph's
        outs = gm(*(on_cpu or fakes)) if decomposed else fresh(*fakes)
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        # (a tensor the function closed over: a constant the key cannot see,
        # and an attribute the graph it is spliced into does not have)
        raise ValueError("lazy-mlir: the traced function reads a tensor that is not an input")
    _on_cpu(gm)
    return gm, tuple(outs)


def register(gm: fx.GraphModule, inputs: tuple, outputs: tuple) -> Template:
    """The ``Template`` of ``gm`` (``inputs``, ``outputs``: their layouts),
    keyed by its content: the one registered before if the same."""
    digest = hashlib.sha256(f"{gm.code}\n{inputs}\n{outputs}".encode()).hexdigest()[:24]
    template = Template(f"subgraph-{digest}", gm, inputs, outputs)
    TEMPLATES.setdefault(template.key, template)
    return TEMPLATES[template.key]


def _capture_table() -> dict:
    """Our CAPTURE-scope decompositions of the ops the compiler cannot take:
    a template decomposes them as capture does op by op (``_grouped_mm``,
    whose meta kernel refuses float32, could not be traced otherwise)."""
    from .registry import CAPTURE, build_table
    from .support import op_is_supported
    return {op: fn for op, fn in build_table(CAPTURE).items() if not op_is_supported(op)}


def _noting(fn, calls: list):
    def decomposition(*args, **kwargs):
        calls.append(fn)
        return fn(*args, **kwargs)
    return decomposition


def _mutates(node: fx.Node) -> bool:
    return (node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload)
            and node.target._schema.is_mutable)


def template(key: str) -> Template:
    try:
        return TEMPLATES[key]
    except KeyError:
        raise RuntimeError(f"lazy-mlir: no subgraph template {key!r} in this process "
                           "(templates are made by lazy/backward.py before use)") from None


def inline(graph: fx.Graph, key: str, args: list) -> list:
    """Copy template ``key``'s nodes into ``graph`` with its placeholders
    bound to ``args`` (fx nodes); returns the nodes of its outputs."""
    gm = template(key).gm
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        raise RuntimeError(f"lazy-mlir: subgraph {key} takes {len(placeholders)} tensors, "
                           f"got {len(args)}")
    env = dict(zip(placeholders, args))
    out = graph.graph_copy(gm.graph, env)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _fake(inputs, key):
    return [torch.empty_strided(shape, stride, dtype=dtype, device=inputs[0].device)
            for shape, stride, dtype in template(key).outputs]


def _subgraph(inputs, key):
    """The CPU kernel and the decomposition: the template's graph itself."""
    return list(template(key).gm(*inputs))


_LIB.impl("subgraph", _subgraph, "CompositeExplicitAutograd")
torch.library.register_fake("lazy_mlir::subgraph", _fake, lib=_LIB)
register_decomposition(ops.subgraph.default, scope=IMPORT)(_subgraph)
