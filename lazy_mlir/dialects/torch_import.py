"""fx graph -> torch dialect, through torch-mlir's FxImporter."""
from __future__ import annotations

import torch.fx as fx
from torch_mlir import ir
from torch_mlir.dialects import arith as arith_d  # noqa: F401 (for passes/bf16_casts)
from torch_mlir.dialects import func as func_d  # noqa: F401 (for linalg_edit)
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_importer import FxImporter
from .as_strided_base import fresh_dtype_bases
from .uint8_literals import reparseable


def new_context() -> ir.Context:
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    return ctx


def import_fx(gm: fx.GraphModule, func_name: str = "main") -> ir.Module:
    """The torch-dialect module of ``gm`` (value semantics; one function,
    plus one private function per graph of a ``while_loop`` in it, whose
    loops are made counted: ``counted_loops``)."""
    fresh_dtype_bases(gm)  # (before the importer's as_strided rewrite)
    imp = FxImporter(context=new_context())
    if any(isinstance(m, fx.GraphModule) for m in gm.children()):
        imp.import_graph_module(gm, func_name=func_name)
        with imp.module.context, ir.Location.unknown():
            counted_loops(imp.module)
    else:
        symbolic = _symbol_ranges(gm)
        imp._cc._symbolic_guards = symbolic  # (what set_symbolic_guards makes of an export)
        imp.import_stateless_graph(gm.graph, func_name=func_name,
                                   import_symbolic_shape_expressions=bool(symbolic))
    return imp.module


def _symbol_ranges(gm: fx.GraphModule) -> dict:
    """Each size symbol of ``gm``'s inputs (``pipeline.size_family``'s
    dynamic dimensions) with its range, as FxImporter takes them from an
    ``ExportedProgram``: the module then binds every tensor's symbolic sizes
    (``torch.bind_symbolic_shape``), which IREE's torch input turns into
    shape facts."""
    import torch
    from torch_mlir.extras.fx_importer import RangeConstraint
    ranges = {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op != "placeholder" or not isinstance(val, torch.Tensor):
            continue
        for s in val.shape:
            if isinstance(s, torch.SymInt):
                env = s.node.shape_env
                for sym in s.node.expr.free_symbols:
                    r = env.var_to_range.get(sym)
                    low = int(r.lower) if r is not None else 0
                    ranges[str(sym)] = RangeConstraint(low, 2 ** 62)
    return ranges


def counted_loops(module: ir.Module) -> int:
    """Make every ``torch.prim.Loop`` that FxImporter made of a ``while_loop``
    counted: trip count ``n`` and condition true, where its condition
    function is ``i < n`` on the first carry (``ops/loops.py``'s ``fori``
    starts it at 0 and adds 1 per step; it makes every such loop). A counted
    loop lowers to ``scf.for``; torch-mlir 20261001 lowers the while-form by
    dropping the condition (2**63 - 1 iterations), so any other condition
    raises. Returns the number of loops rewritten."""
    funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op
             for op in module.body.operations if op.operation.name == "func.func"}
    loops = []

    def visit(op):
        if op.name == "torch.prim.Loop":
            loops.append(op)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    used = set()
    for loop in loops:
        callee, n = _loop_bound(loop.operands[1], funcs)
        _check_counter(loop, funcs)
        used.add(callee)
        with ir.InsertionPoint(loop):
            trips = _constant("torch.constant.int", "!torch.int",
                              ir.IntegerAttr.get(ir.IntegerType.get_signless(64), n))
            unbounded = loop.operands[0]
            loop.operation.operands[0] = trips
            if unbounded.owner.name == "torch.constant.int" and not list(unbounded.uses):
                unbounded.owner.erase()
            _replace_condition(loop, 1)
        body = loop.regions[0].blocks[0]
        terminator = list(body.operations)[-1]
        _loop_bound(terminator.operands[0], funcs)
        with ir.InsertionPoint(terminator):
            _replace_condition(terminator, 0)
    for name in used:  # nothing calls them any more
        funcs[name].operation.erase()
    return len(loops)


def _constant(name: str, type_: str, value: ir.Attribute):
    return ir.Operation.create(name, results=[ir.Type.parse(type_)],
                               attributes={"value": value}).result


def _replace_condition(op, index: int) -> None:
    """``op``'s operand ``index`` (``Bool.Tensor(call @cond(...))``) becomes
    ``true``; the call and conversion go (their only use)."""
    to_bool = op.operands[index].owner
    op.operation.operands[index] = _constant("torch.constant.bool", "!torch.bool", ir.BoolAttr.get(True))
    call = to_bool.operands[0].owner
    to_bool.operation.erase()
    call.operation.erase()


def _loop_bound(condition, funcs) -> tuple[str, int]:
    """``(callee, n)`` for a loop condition ``Bool.Tensor(call @f(i, ...))``
    where ``@f`` returns ``i < n``; raises otherwise."""
    to_bool = condition.owner
    call = to_bool.operands[0].owner if to_bool.name == "torch.aten.Bool.Tensor" else None
    if call is None or call.name != "func.call":
        raise NotImplementedError("lazy-mlir: a torch.prim.Loop whose condition is not a call "
                                  "of a while_loop's condition function")
    callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
    block = funcs[callee].regions[0].blocks[0]
    ops = list(block.operations)
    names = [op.name for op in ops]
    if (names == ["torch.constant.int", "torch.aten.lt.Scalar", "func.return"]
            and ops[1].operands[0] == block.arguments[0]
            and ops[1].operands[1] == ops[0].result):
        return callee, ir.IntegerAttr(ops[0].attributes["value"]).value
    raise NotImplementedError(
        f"lazy-mlir: a while_loop's condition {callee} is not `i < n` on its first carry "
        "(make counted loops with lazy_mlir.ops.loops.fori; torch-mlir 20261001 mislowers "
        "other while loops)")


def _check_counter(loop, funcs) -> None:
    """Raises unless ``loop``'s first carry starts at 0 and its body returns
    it plus 1: then ``i < n`` holds for exactly ``n`` trips."""
    body = loop.regions[0].blocks[0]
    call = list(body.operations)[0]
    if _is_zeros(loop.operands[2].owner) and call.name == "func.call":
        callee = ir.FlatSymbolRefAttr(call.attributes["callee"]).value
        block = funcs[callee].regions[0].blocks[0]
        step = list(block.operations)[-1].operands[0].owner
        terminator = list(body.operations)[-1]
        if (step.name == "torch.aten.add.Scalar" and step.operands[0] == block.arguments[0]
                and all(_int_constant(v) == 1 for v in step.operands[1:])
                and list(call.operands)[0] == body.arguments[1]
                and terminator.operands[1] == call.results[0]):
            return
    raise NotImplementedError(
        "lazy-mlir: a while_loop whose counter does not start at 0 and grow by 1 a step "
        "(make counted loops with lazy_mlir.ops.loops.fori; torch-mlir 20261001 mislowers "
        "other while loops)")


_ZEROS = {"torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros"}
_FULL_VALUE = {"torch.aten.full": 1, "torch.aten.full_like": 1, "torch.aten.new_full": 2}
"""Operand index of the fill value (``fori``'s ``torch.zeros`` is traced as
``full_like`` by the pipeline's decompositions)."""


def _is_zeros(op) -> bool:
    if op.name in _ZEROS:
        return True
    if op.name not in _FULL_VALUE:
        return False
    fill = op.operands[_FULL_VALUE[op.name]].owner
    if fill.name == "torch.constant.int":
        return ir.IntegerAttr(fill.attributes["value"]).value == 0
    return fill.name == "torch.constant.float" and ir.FloatAttr(fill.attributes["value"]).value == 0.0


def _int_constant(value) -> int | None:
    op = value.owner
    if op.name != "torch.constant.int":
        return None
    return ir.IntegerAttr(op.attributes["value"]).value


def parse(text: str) -> ir.Module:
    return ir.Module.parse(reparseable(text), new_context())
