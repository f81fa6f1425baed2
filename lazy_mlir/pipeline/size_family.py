"""Graphs that differ only in sizes: one family, one module with dynamic dimensions.

``family_of(gm)`` splits an fx module (``to_fx``'s) into its structure (ops,
dtypes, ranks, where each argument comes from, every non-integer constant)
and its sizes (each input's dimensions and every integer argument). Two
graphs of one family compute the same thing but for those sizes; as
Dynamo's automatic dynamic shapes do, the first size compiles static and a
second one of the family derives a ``SizePlan`` (``derive_plan``): which
input dimensions vary (one symbol per class of dimensions that varied
together) and, for every integer argument that varied, the expression of
those symbols it equals in both graphs (``view`` to ``[b * t, 64]``,
``arange(t)``, a slice to ``t - 1``). ``SizePlan.admits`` is the guard: a
graph of the family runs on the plan's module exactly when every static
dimension and constant is unchanged and every varied integer equals its
expression at the new sizes, so the module computes that very graph.

A dimension of size 0 or 1 never becomes dynamic (broadcasting and empty
tensors are decided by it), nor does a non-contiguous input's.
"""
from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass

import sympy
import torch
import torch.fx as fx
from torch.utils import _pytree as pytree

from ..ops.symbolic import SYMBOLIC_DECOMPOSITIONS

MIN_DYNAMIC = 2  # sizes 0 and 1 stay static (broadcasting, emptiness)


@dataclass(frozen=True)
class Sizes:
    """One graph's sizes: each input's shape, which inputs are contiguous,
    and every integer argument, in node order."""

    shapes: tuple[tuple[int, ...], ...]
    contiguous: tuple[bool, ...]
    ints: tuple[int, ...]


@dataclass(frozen=True)
class Expr:
    """``k * prod(classes) + add``: an integer argument as a function of
    the dynamic dimensions' classes."""

    classes: tuple[int, ...]
    k: int = 1
    add: int = 0

    def value(self, sizes) -> int:
        p = self.k
        for c in self.classes:
            p = p * sizes[c] if p != 1 else sizes[c]
        return p + self.add if self.add else p


@dataclass(frozen=True)
class SizePlan:
    """Which input dimensions are dynamic (``dims[i][d]``: a class, or
    None where static), their sizes when the plan was made (``hints``), and
    the integer arguments that follow them (``exprs``: position -> Expr;
    every other integer is the constant in ``ints``)."""

    dims: tuple[tuple[int | None, ...], ...]
    hints: tuple[int, ...]
    exprs: tuple[tuple[int, Expr], ...]
    sizes: Sizes
    guards: tuple[str, ...] = ()  # what the symbolic trace assumed (``guards_hold``)
    ranges: tuple = ()  # per class, (min, max or None) if not (MIN_DYNAMIC, None): export

    @property
    def key(self) -> str:
        return hashlib.sha256(repr((self.dims, self.exprs, self.sizes.contiguous,
                                    self.static_parts())).encode()).hexdigest()

    def static_parts(self) -> tuple:
        """The sizes that stay constants of the module."""
        shapes = tuple(tuple(None if c is not None else s for s, c in zip(shape, cls))
                       for shape, cls in zip(self.sizes.shapes, self.dims))
        varied = {p for p, _ in self.exprs}
        return shapes, tuple(v for p, v in enumerate(self.sizes.ints) if p not in varied)

    def class_sizes(self, sizes: Sizes) -> tuple[int, ...] | None:
        """Each class's size in ``sizes``; None where the classes or the
        static dimensions do not fit the plan."""
        found: list = [None] * len(self.hints)
        for shape, cls, old, contiguous in zip(sizes.shapes, self.dims, self.sizes.shapes,
                                               sizes.contiguous):
            if len(shape) != len(cls):
                return None
            for s, c, o in zip(shape, cls, old):
                if c is None:
                    if s != o:
                        return None
                elif s < MIN_DYNAMIC or found[c] not in (None, s) or not contiguous:
                    return None
                else:
                    found[c] = s
        return tuple(found)

    def admits(self, sizes: Sizes) -> bool:
        """Whether the module of this plan computes the graph of ``sizes``."""
        values = self.class_sizes(sizes)
        if values is None or len(sizes.ints) != len(self.sizes.ints):
            return False
        exprs = dict(self.exprs)
        for p, (new, old) in enumerate(zip(sizes.ints, self.sizes.ints)):
            e = exprs.get(p)
            if (new != old) if e is None else (new != e.value(values)):
                return False
        return guards_hold(self.guards, values)

    def admits_shapes(self, shapes, contiguous) -> bool:
        """Whether the module of this plan takes inputs of ``shapes`` (with
        ``contiguous``), its integers then being the plan's expressions of
        the new sizes: a graph not traced (``compile_train_step``'s replay
        at a new batch size), assumed to be the family's at those sizes."""
        values = self.class_sizes(Sizes(tuple(shapes), tuple(contiguous), self.sizes.ints))
        return values is not None and guards_hold(self.guards, values)

    def dynamic_inputs(self) -> set[int]:
        """The positions of the inputs with a dynamic dimension."""
        return {i for i, cls in enumerate(self.dims) if any(c is not None for c in cls)}


def family_of(gm: fx.GraphModule) -> tuple[str | None, Sizes]:
    """(the family key of ``gm``'s structure, its sizes). The key is None
    for a module that holds constants or submodules (not keyed here)."""
    h = hashlib.sha256(b"size-family:1\n")
    position: dict[fx.Node, int] = {}
    shapes, contiguous, ints = [], [], []
    opaque = False

    def leaf(a):
        if isinstance(a, fx.Node):
            return f"%{position[a]}"
        if type(a) is int:
            ints.append(a)
            return "#"
        return repr(a)

    for i, node in enumerate(gm.graph.nodes):
        position[node] = i
        val = node.meta.get("val")
        if node.op == "placeholder":
            shapes.append(tuple(val.shape))
            contiguous.append(val.is_contiguous())
            h.update(f"in {val.dtype} {val.dim()}\n".encode())
            continue
        if node.op not in ("call_function", "output"):
            opaque = True
            continue
        leaves, spec = pytree.tree_flatten((_inferred(node), node.kwargs))
        h.update(f"{node.op} {_name(node.target)} {spec} {[leaf(a) for a in leaves]} "
                 f"{_dtypes(val)}\n".encode())
    return (None if opaque else h.hexdigest()), Sizes(tuple(shapes), tuple(contiguous),
                                                      tuple(ints))


_VIEWS = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                    torch.ops.aten.reshape.default})


def _inferred(node: fx.Node) -> tuple:
    """``node``'s args, a view's ``-1`` size replaced by the size it stands
    for: a dynamic one then follows its expression (else the module's shape
    holds a floor division, which FxImporter cannot express)."""
    if node.target not in _VIEWS or -1 not in node.args[1]:
        return node.args
    shape = list(node.meta["val"].shape)
    return (node.args[0], [s if a == -1 else a for a, s in zip(node.args[1], shape)],
            *node.args[2:])


def _name(target) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", str(target)) + (
        str(target) if isinstance(target, torch._ops.OpOverload) else "")


def _dtypes(val) -> str:
    if isinstance(val, torch.Tensor):
        return f"{val.dtype}/{val.dim()}"
    if isinstance(val, (list, tuple)):
        return ",".join(_dtypes(v) for v in val)
    return type(val).__name__


def derive_plan(first: Sizes, second: Sizes) -> SizePlan | None:
    """The plan under which one module computes both graphs of a family
    (``second``'s sizes as hints); None where some integer that varied is
    no expression of the varied dimensions, or no dimension varied."""
    classes: dict[tuple[int, int], int] = {}
    dims = []
    for a_shape, b_shape, a_c, b_c in zip(first.shapes, second.shapes, first.contiguous,
                                          second.contiguous):
        cls = []
        for a, b in zip(a_shape, b_shape):
            if a == b:
                cls.append(None)
                continue
            if min(a, b) < MIN_DYNAMIC or not (a_c and b_c):
                return None
            cls.append(classes.setdefault((a, b), len(classes)))
        dims.append(tuple(cls))
    if not classes:
        return None
    pairs = sorted(classes, key=classes.get)
    exprs = []
    for p, (a, b) in enumerate(zip(first.ints, second.ints)):
        if a != b:
            e = explain(a, b, pairs)
            if e is None:
                return None
            exprs.append((p, e))
    return SizePlan(tuple(dims), tuple(b for _, b in pairs), tuple(exprs), second)


def explain(a: int, b: int, pairs: list[tuple[int, int]]) -> Expr | None:
    """The simplest ``k * prod(classes) + add`` (k a nonzero integer) that
    is ``a`` at the first sizes and ``b`` at the second (``pairs``: each
    class's sizes): one with no ``add`` before one with, then a positive
    ``k`` (a negative one: the ``-n`` an index is clamped from), then
    ``k == 1`` first, then one class before a product of two. Two points fit many
    lines: ``t * t`` (256, 576 at t = 16, 24: GPT-2's attention masks) is
    also ``40 * t - 384``, and ``b * t`` is ``12 * b - 12`` at (2, 6),
    (3, 8). No division: a module's shapes must stay affine in its symbols
    (FxImporter)."""
    products = [((c,), x, y) for c, (x, y) in enumerate(pairs)]
    products += [((c, e), pairs[c][0] * pairs[e][0], pairs[c][1] * pairs[e][1])
                 for c in range(len(pairs)) for e in range(c, len(pairs))]
    found = []
    for cls, x, y in products:
        if x != y and (a - b) % (x - y) == 0 and (a - b) // (x - y) != 0:
            k = (a - b) // (x - y)
            found.append(Expr(cls, k=k, add=a - k * x))
    return min(found, key=lambda e: (e.add != 0, e.k < 0, e.k != 1, len(e.classes)),
               default=None)


def symbolic_args(node: fx.Node, exprs: dict, first: int, sizes) -> tuple[tuple, dict, int]:
    """``node``'s (args, kwargs) with the integers at positions ``first``...
    that ``exprs`` names replaced by their expression of ``sizes`` (SymInts
    while tracing); and the position after its last integer."""
    leaves, spec = pytree.tree_flatten((_inferred(node) if node.op == "call_function"
                                        else node.args, node.kwargs))
    p = first
    for i, a in enumerate(leaves):
        if type(a) is int:
            e = exprs.get(p)
            if e is not None:
                leaves[i] = e.value(sizes)
            p += 1
    args, kwargs = pytree.tree_unflatten(leaves, spec)
    return args, kwargs, p


def symbolic_module(gm: fx.GraphModule, plan: SizePlan) -> fx.GraphModule:
    """``gm`` traced again with its dynamic dimensions symbolic: one
    symbol per class (ranged from ``MIN_DYNAMIC``, or ``plan.ranges``), the integers ``plan``
    varies computed from them, every ``meta["val"]`` a fake tensor of
    symbolic sizes (what FxImporter imports as ``?`` dimensions)."""
    from torch._dynamo.source import ConstantSource
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    env = ShapeEnv(duck_shape=False)  # (duck sizing would merge classes of equal hints)
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    symbols = []
    for c, hint in enumerate(plan.hints):
        sym = env.create_symbol(hint, ConstantSource(f"dim{c}"))
        lo, hi = plan.ranges[c] if plan.ranges else (MIN_DYNAMIC, None)
        env.constrain_symbol_range(sym, compiler_min=lo, compiler_max=hi or 2 ** 62)
        symbols.append(env.create_symintnode(sym, hint=hint))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fakes = []
    with mode:
        for node, cls in zip(placeholders, plan.dims):
            val = node.meta["val"]
            shape = [s if c is None else symbols[c] for s, c in zip(val.shape, cls)]
            if any(c is not None for c in cls):
                fakes.append(torch.empty(shape, dtype=val.dtype))
            else:
                fakes.append(torch.empty_strided(shape, val.stride(), dtype=val.dtype))
    # (class -> an input dimension of it: the traced function reads its size there)
    where = {c: (i, d) for i, cls in enumerate(plan.dims) for d, c in enumerate(cls)
             if c is not None}
    exprs = dict(plan.exprs)

    def replay(*inputs):
        sizes = [inputs[where[c][0]].shape[where[c][1]] for c in range(len(plan.hints))]
        env_: dict = {}
        it = iter(inputs)
        p = 0
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                env_[node] = next(it)
                continue
            args, kwargs, p = symbolic_args(node, exprs, p, sizes)
            args, kwargs = fx.node.map_arg((args, kwargs), lambda n: env_[n])
            if node.op == "output":
                return args[0]
            with _no_format_guess() if node.target in _CONVOLUTIONS else contextlib.nullcontext():
                env_[node] = node.target(*args, **kwargs)
            fixed = [s for s in names if env.replacements.get(s, s).is_number]
            if fixed:
                raise SizeSpecialized(f"{node.format_node()} specializes a dynamic "
                                      f"dimension: {fixed[0]} = {env.replacements[fixed[0]]}")
        raise AssertionError("an fx graph without an output")

    names = {sym.node.expr: f"d{c}" for c, sym in enumerate(symbols)}
    with mode:
        traced = make_fx(replay, decomposition_table=SYMBOLIC_DECOMPOSITIONS)(*fakes)
    named = {s: sympy.Symbol(n, integer=True) for s, n in names.items()}
    # (a class the trace found equal to an expression of others, ``labels``
    # of length 3 * (t - 1): the module holds only while it is)
    assumed = [g.expr for g in env.guards] + [sympy.Eq(s, env.replacements[s]) for s in names
                                               if env.replacements.get(s, s) != s]
    traced.meta["size_guards"] = tuple(sorted({str(e.xreplace(named)) for e in assumed}))
    return traced


def guards_hold(guards: tuple[str, ...], sizes) -> bool:
    """Whether every guard of a symbolic trace (``size_guards``: sympy over
    ``d0``, ``d1``, ... the classes) holds at the class sizes ``sizes``."""
    if not guards:
        return True
    values = {sympy.Symbol(f"d{c}", integer=True): v for c, v in enumerate(sizes)}
    return all(bool(sympy.sympify(g, locals={str(k): k for k in values}).xreplace(values))
               for g in guards)


_CONVOLUTIONS = frozenset({torch.ops.aten.convolution.default,
                          torch.ops.aten._convolution.default,
                          torch.ops.aten.convolution_backward.default})


@contextlib.contextmanager
def _no_format_guess():
    """A convolution's fake kernel without its guess of the result's memory
    format (torch 2.13 ``fake_impls.conv``, taken only where every size has
    a hint): the guess guarded the batch size (``b < 16``, oneDNN's choice
    of layout), and strides are nothing a module keeps."""
    from torch.fx.experimental import symbolic_shapes
    had = symbolic_shapes.has_guarding_hint
    symbolic_shapes.has_guarding_hint = lambda s: False
    try:
        yield
    finally:
        symbolic_shapes.has_guarding_hint = had


def still_symbolic(gm: fx.GraphModule) -> None:
    """Raises ``SizeSpecialized`` where a trace of ``gm`` after
    ``symbolic_module`` (the pipeline's decompositions) fixed one of its
    inputs' symbolic sizes to a number: the module would compute that size
    only, whatever its inputs' sizes."""
    for node in gm.graph.nodes:
        val = node.meta.get("val") if node.op == "placeholder" else None
        for size in getattr(val, "shape", ()):
            # (a SymInt's expression reads through its ShapeEnv's replacements)
            if isinstance(size, torch.SymInt) and size.node.expr.is_number:
                raise SizeSpecialized(f"a decomposition fixes a dynamic size to "
                                      f"{size.node.expr}")


class SizeSpecialized(Exception):
    """An op's shape function tests a dynamic size against a constant: the
    module would hold only for that size, so the family compiles static."""


def is_symbolic(gm: fx.GraphModule) -> bool:
    """Whether an input of ``gm`` has a symbolic size."""
    return any(n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
               and any(isinstance(s, torch.SymInt) for s in n.meta["val"].shape)
               for n in gm.graph.nodes)


def exact_floor_divisions(gm: fx.GraphModule) -> int:
    """Every floor division of symbolic sizes in ``gm``'s metadata that is
    exact for all sizes replaced by its quotient; the number of values
    rewritten. A view that splits a dimension computes the outer size as
    ``numel // inner`` (torch's ``prims.split_dim``), and torch 2.13's sympy
    simplifies that only where the divisor is a syntactic factor: a flat
    ``[4 * t**2]`` (a dropout mask) viewed as ``[2, 2, t, t]`` keeps
    ``(t**2)//t``, which FxImporter cannot express (its shapes are
    semi-affine). A division that is not exact (``t // 2``) stays: such a
    module still fails to import, and its family compiles static."""
    rewritten = 0
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        new = _exact_val(val)
        if new is not val:
            node.meta["val"] = new
            rewritten += 1
    return rewritten


def _exact_val(val):
    """``val`` (a fake tensor, SymInt, or a list or tuple of them) with exact
    quotients for its sizes' floor divisions; ``val`` itself if none."""
    if isinstance(val, (list, tuple)):
        new = [_exact_val(v) for v in val]
        return val if all(n is v for n, v in zip(new, val)) else type(val)(new)
    if isinstance(val, torch.SymInt):
        expr = _exact_quotients(val.node.expr)
        if expr is val.node.expr:
            return val
        return val.node.shape_env.create_symintnode(expr, hint=val.node.hint)
    if not isinstance(val, torch.Tensor) or not any(
            isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride())):
        return val
    old_shape, old_stride = tuple(val.shape), val.stride()
    shape, stride = _exact_val(old_shape), _exact_val(old_stride)
    if shape is old_shape and stride is old_stride:
        return val
    with val.fake_mode:
        return torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device)


def _exact_quotients(expr):
    """``expr`` with each ``FloorDiv(a, b)`` where ``a / b`` is a polynomial
    of integer coefficients (so ``a == q * b`` for every size) replaced by
    that polynomial; ``expr`` itself where there is none."""
    from torch.utils._sympy.functions import FloorDiv
    if not expr.has(FloorDiv):
        return expr

    def quotient(e):
        try:
            q = sympy.cancel(e.args[0] / e.args[1])
            symbols = sorted(q.free_symbols, key=str)
            if not symbols:
                return q if q.is_integer else None
            if q.is_polynomial(*symbols) and all(
                    c.is_integer for c in sympy.Poly(q, *symbols).coeffs()):
                return sympy.expand(q)
        except sympy.PolynomialError:
            pass
        return None

    new = expr.replace(lambda e: isinstance(e, FloorDiv) and quotient(e) is not None, quotient)
    return expr if new == expr else new
