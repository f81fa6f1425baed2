"""Small edits of the linalg-on-tensors module the linalg pipeline has just
made, for the project's linalg-stage passes (``passes/conv_channels_last.py``):
what they need of the MLIR bindings, so the passes themselves import none.

They edit the module in place, inside ``dialects.runner.run_pipeline``: its
context has every dialect the pipeline loaded (``tm_tensor`` too), which a
fresh parse of the printed text would not know.
"""
from __future__ import annotations

from .torch_import import func_d, ir

__all__ = ["ops_named", "shape", "element_type", "int_list", "zero_pad", "add_functions",
           "call_instead"]


def ops_named(module: ir.Module, name: str) -> list:
    """Every operation called ``name`` (``linalg.conv_2d_nchw_fchw``), in order."""
    found = []

    def visit(op):
        if op.name == name:
            found.append(op)
        return ir.WalkResult.ADVANCE
    module.operation.walk(visit)
    return found


def shape(value) -> list[int] | None:
    """The static shape of a ranked tensor value (None otherwise)."""
    t = value.type
    if not isinstance(t, ir.RankedTensorType) or not t.has_static_shape:
        return None
    return list(t.shape)


def element_type(value) -> str:
    """``f32``, ``bf16``, ...: the element type of a ranked tensor value."""
    return str(ir.RankedTensorType(value.type).element_type)


def int_list(op, attribute: str) -> list[int] | None:
    """An integer-elements attribute of ``op`` (strides, dilations) as a list."""
    if attribute not in op.attributes:
        return None
    return list(ir.DenseIntElementsAttr(op.attributes[attribute]))


def zero_pad(value) -> tuple[object, list[int], list[int]] | None:
    """(source, low, high) when ``value`` is a ``tensor.pad`` of ``source`` by
    static amounts with the constant zero; None otherwise."""
    if not isinstance(value, ir.OpResult):
        return None
    op = value.owner
    if op.name != "tensor.pad" or len(op.operands) != 1:  # dynamic amounts are operands
        return None
    yielded = list(op.regions[0].blocks[0].operations)[-1].operands[0]
    if not isinstance(yielded, ir.OpResult) or yielded.owner.name != "arith.constant":
        return None
    constant = yielded.owner.attributes["value"]
    if not isinstance(constant, ir.FloatAttr) or constant.value != 0.0:
        return None
    return (op.operands[0], list(ir.DenseI64ArrayAttr(op.attributes["static_low"])),
            list(ir.DenseI64ArrayAttr(op.attributes["static_high"])))


def add_functions(module: ir.Module, text: str) -> None:
    """Parse the functions in ``text`` and move them into ``module``. Ops of
    dialects torch-mlir does not register (IREE's ``util``) are allowed, in
    generic form: they pass through to iree-compile, which knows them."""
    module.context.allow_unregistered_dialects = True
    other = ir.Module.parse(text, module.context)
    for op in list(other.body.operations):
        module.body.append(op.detach_from_parent())


def call_instead(op, callee: str, operands: list) -> None:
    """Replace the one-result ``op`` by ``func.call @callee(operands)``."""
    with ir.InsertionPoint(op), op.location:
        call = func_d.CallOp([op.results[0].type], ir.FlatSymbolRefAttr.get(callee), operands)
    op.results[0].replace_all_uses_with(call.results[0])
    op.erase()
