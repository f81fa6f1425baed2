"""A ``subgraph`` template traced once for every size of its inputs.

A template traced on fake tensors of one size (``subgraph.make_template``)
holds that size as a constant wherever the graph uses it (``view`` to
``[b * t, 64]``, ``expand``, ``sum`` over a shape), so a backward at a new
sequence length had to be traced again: seconds of ``make_fx`` per length
(issue 53). ``trace_sized`` traces the function once on fake tensors whose
sizes are symbols, duck-sized as Dynamo's are (equal sizes one symbol; 0
and 1 stay numbers), and keeps what the trace assumed of them (the
ShapeEnv's guards: ``t - 1 != 1``, ``s == b * t``). ``SizedTemplate.at``
then gives the ``Template`` at concrete inputs without tracing: their
sizes bound to the symbols, every size the graph computes (``sym_size``,
arithmetic on sizes) evaluated to a number, as if traced at those sizes.
Where the inputs do not fit (a symbol would take two values, a number
changed, an assumption fails: the graph's structure depends on that size)
it returns None and the caller traces again.

Sizes reach a traced function also as plain integers (compiled autograd
passes each dynamic size as an empty ``[0, n]`` tensor); such *carriers*
are traced as inputs and leave the instances: only their sizes are read.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch
import torch.fx as fx

from . import subgraph


@dataclass(frozen=True)
class _Placeholder:
    dtype: torch.dtype
    shape: tuple  # sympy expressions
    stride: tuple


@dataclass
class SizedTemplate:
    """A traced function of symbolic sizes and what the trace assumed."""

    gm: fx.GraphModule  # its placeholders: the tensors, then the carriers
    placeholders: tuple[_Placeholder, ...]
    outputs: tuple  # (shape, stride, dtype) of each output, sympy sizes
    guards: tuple  # sympy booleans over the symbols
    lower: dict  # symbol -> the least size it was traced for
    tensors: int  # how many placeholders are tensors (the rest: carriers)
    instances: dict = field(default_factory=dict)  # symbol values -> Template
    _mode: object = None

    @property
    def symbolic(self) -> bool:
        return bool(self.lower)

    def at(self, tensors: list, carriers: list) -> subgraph.Template | None:
        """The template of these inputs, or None where they do not fit."""
        values = self._bind(list(tensors) + list(carriers))
        if values is None:
            return None
        key = tuple(sorted((str(s), v) for s, v in values.items()))
        template = self.instances.get(key)
        if template is None:
            template = self.instances[key] = self._instance(values)
        return template

    def _bind(self, tensors: list) -> dict | None:
        if len(tensors) != len(self.placeholders):
            return None
        values: dict = {}
        for p, t in zip(self.placeholders, tensors):
            if t.dtype != p.dtype or t.dim() != len(p.shape):
                return None
            for e, n in zip(p.shape, t.shape):
                if isinstance(e, sympy.Symbol) and values.setdefault(e, n) != n:
                    return None  # (two sizes one symbol stood for: traced equal)
        if any(values.get(s, lo) < lo for s, lo in self.lower.items()):
            return None  # (0 and 1 are never symbols: broadcasting, emptiness)
        memo: dict = {}
        try:
            for p, t in zip(self.placeholders, tensors):
                if any(_number(e, values, memo) != n for e, n in zip(p.shape, t.shape)) or \
                        any(_number(e, values, memo) != n for e, n, size in
                            zip(p.stride, t.stride(), t.shape) if size > 1):
                    return None  # (a size-1 dimension's stride: any)
            if not all(_number(g, values, memo) for g in self.guards):
                return None
        except _Unbound:
            return None
        return values

    def _instance(self, values: dict) -> subgraph.Template:
        """The graph at ``values``: each size a number, each node's
        ``meta["val"]`` a fake tensor of those sizes."""
        from torch._subclasses.fake_tensor import FakeTensorMode
        if self._mode is None:
            self._mode = FakeTensorMode(allow_non_fake_inputs=True)
        memo: dict = {}

        def number(e):
            return _number(e, values, memo)

        def fake(val):
            if isinstance(val, torch.Tensor):
                return _fake(self._mode, [number(_expr(s)) for s in val.shape],
                             [number(_expr(s)) for s in val.stride()], val.dtype, val.device)
            if isinstance(val, (list, tuple)):
                return type(val)(fake(v) for v in val)
            return val

        graph = fx.Graph()
        env: dict = {}
        carriers = set()
        for i, node in enumerate(n for n in self.gm.graph.nodes if n.op == "placeholder"):
            if i >= self.tensors:
                carriers.add(node)

        def arg(n):
            if n in carriers:
                raise ValueError(f"lazy-mlir: {n} (a size) is read as a tensor")
            return env[n]
        for node in self.gm.graph.nodes:
            val = node.meta.get("val")
            if node in carriers:
                continue
            if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                env[node] = number(val.node.expr)  # (a size the graph computes)
                continue
            new = graph.node_copy(node, arg)
            new.meta = {k: v for k, v in node.meta.items() if k not in _SYMBOLIC_META}
            if val is not None:
                new.meta["val"] = fake(val)
            env[node] = new
        gm = fx.GraphModule(torch.nn.Module(), graph)
        inputs = tuple(tuple(tuple(number(e) for e in es) for es in (p.shape, p.stride))
                       + (p.dtype,) for p in self.placeholders[:self.tensors])
        outputs = tuple((tuple(number(e) for e in shape), tuple(number(e) for e in stride),
                         dtype) for shape, stride, dtype in self.outputs)
        return subgraph.register(gm, inputs, outputs)


# (fx metadata a symbolic trace leaves that states symbolic sizes)
_SYMBOLIC_META = ("val", "tensor_meta", "unbacked_bindings", "example_value")


class _Unbound(Exception):
    """An expression over a symbol no input binds."""


def _expr(s):
    return s.node.expr if isinstance(s, (torch.SymInt, torch.SymFloat, torch.SymBool)) \
        else sympy.sympify(s)


def _number(e, values: dict, memo: dict):
    """``e`` at ``values``, a Python number (or bool)."""
    if isinstance(e, (int, float, bool)):
        return e
    if e.is_Integer:
        return int(e)
    hit = values.get(e)
    if hit is not None:
        return hit
    hit = memo.get(e)
    if hit is None:
        x = e.xreplace(values)
        if x.free_symbols:
            raise _Unbound(str(e))
        hit = memo[e] = (bool(x) if isinstance(x, sympy.logic.boolalg.BooleanAtom)
                         else int(x) if x.is_Integer else float(x))
    return hit


def _fake(mode, shape, stride, dtype, device):
    from torch._subclasses.fake_tensor import FakeTensor
    meta = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    return FakeTensor(mode, meta, device)


def trace_sized(fn, tensors: list[torch.Tensor], carriers: list[torch.Tensor],
                symbolic: bool = True) -> SizedTemplate:
    """``fn(*tensors, *carriers)`` traced with every size of a dense input
    symbolic (with ``symbolic`` false: as they are, a template of these
    sizes only). Raises where it cannot be traced so."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)

    def size(n: int, name: str):
        if not symbolic:
            return n
        sym = env.create_symbol(n, ConstantSource(name), dynamic_dim=DimDynamic.DUCK)
        return env.create_symintnode(sym, hint=n, source=ConstantSource(name))
    fakes, on_cpu = [], []
    with mode:  # (made by the mode: a storage offset of symbolic sizes too)
        for i, t in enumerate(list(tensors) + list(carriers)):
            shape = [size(n, f"x{i}_{d}") for d, n in enumerate(t.shape)]
            stride = _strides(t, shape)
            fakes.append(torch.empty_strided(shape, stride, dtype=t.dtype, device=t.device))
            on_cpu.append(torch.empty_strided(shape, stride, dtype=t.dtype))
    gm, outs = subgraph.trace(fn, fakes, mode, on_cpu if symbolic else None)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if any(not isinstance(n.meta.get("val"), (torch.SymInt, torch.SymBool))
           for p in placeholders[len(tensors):] for n in p.users):
        raise ValueError("lazy-mlir: a size carrier is read as a tensor")
    symbols = {s for f in fakes for n in f.shape for s in _expr(n).free_symbols}
    assumed = [g.expr for g in env.guards] + [
        sympy.Eq(s, env.replacements[s]) for s in symbols if env.replacements.get(s, s) != s]
    assumed += [a.expr for asserts in env.deferred_runtime_asserts.values() for a in asserts]
    placeholders = tuple(_Placeholder(f.dtype, tuple(env.replace(_expr(n)) for n in f.shape),
                                      tuple(env.replace(_expr(n)) for n in f.stride()))
                         for f in fakes)
    outputs = tuple((tuple(env.replace(_expr(n)) for n in o.shape),
                     tuple(env.replace(_expr(n)) for n in o.stride()), o.dtype) for o in outs)
    lower = {s: int(env.var_to_range[s].lower) for s in symbols}
    return SizedTemplate(gm, placeholders, outputs, tuple(env.replace(g) for g in assumed),
                         lower, len(tensors))


def _strides(t: torch.Tensor, shape: list) -> list:
    """``t``'s strides over the sizes ``shape``: from the innermost out, a
    stride that is an inner dimension's stride times its size is that
    product in the symbols (every stride of a dense layout; the heads of a
    slice of a wider row, ``[b, h, t, d]`` strides ``(192 t, 32, 192, 1)``),
    any other a number. A guess: ``SizedTemplate.at`` checks every stride."""
    order = sorted(range(t.dim()), key=lambda d: t.stride(d))
    strides: list = list(t.stride())
    for i, d in enumerate(order):
        if t.shape[d] == 1 and i > 0:  # (any stride: its dense one)
            inner = order[i - 1]
            strides[d] = strides[inner] * shape[inner]
            continue
        for inner in reversed(order[:i]):
            if t.stride(inner) * t.shape[inner] == t.stride(d) and t.shape[inner] > 1:
                strides[d] = strides[inner] * shape[inner]
                break
    return strides
