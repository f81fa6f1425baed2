"""Edits of the imported torch dialect: custom ops (``torch.operator``) as
calls of external functions, which iree-compile makes imports of the module
(``host_calls/passes/rnn.py``); and pipelines without a pass."""
from __future__ import annotations

import re

from torch_mlir import ir
from torch_mlir.dialects import func as func_d

from . import linalg_edit as E


def _dynamic(type_) -> str:
    """``!torch.vtensor<[3,4],f32>`` -> ``!torch.vtensor<[?,?],f32>``."""
    return re.sub(r"\[([0-9,]*)\]", lambda m: "[" + ",".join(
        "?" for d in m.group(1).split(",") if d) + "]", str(type_), count=1)


def _cast(value, type_text: str):
    return ir.Operation.create("torch.tensor_static_info_cast", operands=[value],
                               results=[ir.Type.parse(type_text)]).result


def operators_as_calls(module: ir.Module, callee) -> int:
    """Replace every ``torch.operator`` whose name ``callee(name, reverse)``
    maps to a function name (None: left alone) by a call of that external
    function, in place: tensors cast to dynamic shapes and back, other
    operands as they are but the last, a ``torch.constant.bool`` passed as
    ``reverse``. One private declaration per function. Returns how many."""
    declarations = {}
    count = 0
    with module.context, ir.Location.unknown():
        for op in E.ops_named(module, "torch.operator"):
            *args, flag = op.operands
            producer = E.producer(flag)
            if producer is None or producer.name != "torch.constant.bool":
                continue
            name = callee(ir.StringAttr(op.attributes["name"]).value,
                          ir.BoolAttr(producer.attributes["value"]).value)
            if name is None:
                continue
            with ir.InsertionPoint(op), op.location:
                operands = [_cast(a, _dynamic(a.type)) if "vtensor" in str(a.type) else a
                            for a in args]
                results = [_dynamic(r.type) for r in op.results]
                call = func_d.CallOp([ir.Type.parse(t) for t in results],
                                     ir.FlatSymbolRefAttr.get(name), operands)
                for old, new in zip(op.results, call.results):
                    old.replace_all_uses_with(_cast(new, str(old.type)))
            declarations[name] = (f"func.func private @{name}("
                                  f"{', '.join(str(o.type) for o in operands)}) -> "
                                  f"({', '.join(results)})")
            op.erase()
            count += 1
        if declarations:
            E.add_functions(module, "\n".join(declarations.values()))
    return count


def pipeline_without(pipeline: str, pass_name: str) -> str:
    """``pipeline`` (a ``builtin.module(...)`` string) expanded into its passes,
    less ``pass_name``."""
    from torch_mlir.passmanager import PassManager

    from .torch_import import new_context
    with new_context():
        text = str(PassManager.parse(pipeline))
    return text.replace("," + pass_name, "")


def without_contract_check(pipeline: str) -> str:
    """``pipeline`` (a ``builtin.module(...)`` string) expanded, without
    torch-mlir's linalg backend-contract check, which refuses external calls
    (the host calls, ``passes/bitcast``'s view calls)."""
    return pipeline_without(pipeline, "torch-verify-linalg-on-tensors-backend-contract")


def contract_violation(text: str) -> str | None:
    """Why the linalg module ``text`` still holds torch ops or types, or None
    (what the skipped backend-contract check would have said)."""
    left = sorted(set(re.findall(r"\b(torch(?:_c)?\.[a-z_.]+)", text)))
    return f"torch ops or types left after lowering: {', '.join(left[:5])}" if left else None
