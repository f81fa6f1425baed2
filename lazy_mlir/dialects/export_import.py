"""MLIR for ahead-of-time export: parameters as IREE globals, torch.export import.

Two helpers for ``lazy_mlir.export``, kept here because this package is the
only one that touches MLIR bindings:

- ``bind_parameters`` turns chosen arguments of a lowered ``@main`` (linalg,
  or torch-backend for IREE's torch input) into IREE parameter globals (``#flow.parameter.named<"scope"::"key">``) and adds
  a public entry function that takes only the remaining arguments. At run time
  the values come from a parameter archive (``.irpa``) through IREE's
  ``io_parameters`` module, or are inlined by iree-compile's
  ``--iree-parameter-import``; either way the graph itself is unchanged.
- ``import_exported_program`` imports a ``torch.export`` program (the route
  for symbolic, run-time sizes) to torch dialect text with torch-mlir's
  front end.
"""
from __future__ import annotations

import json

from iree.compiler import ir


def _string(s: str) -> str:
    """An MLIR string literal (JSON escapes are valid MLIR escapes for ASCII)."""
    return json.dumps(s, ensure_ascii=True)


def bind_parameters(text: str, entry: str, keys: list[str | None], scope: str,
                    source: str = "main") -> str:
    """``text`` (linalg on tensors with ``func.func @source(a0, a1, ...)``)
    with ``@source`` made private and a new public ``@entry`` taking the
    arguments whose key is None, in order; argument i with a key is loaded
    from the parameter ``scope::keys[i]`` instead.

    Guarantees: the original function body is untouched (only its name and
    visibility change); argument and result types, including dynamic sizes,
    are carried over exactly; with no keys the result is a plain rename.
    """
    ctx = ir.Context()
    module = ir.Module.parse(text, ctx)
    impl = None
    for op in module.body.operations:
        if op.operation.name == "func.func" and \
                ir.StringAttr(op.attributes["sym_name"]).value == source:
            impl = op
            break
    if impl is None:
        raise ValueError(f"lazy-mlir: no func.func @{source} in the lowered module")
    ftype = ir.FunctionType(ir.TypeAttr(impl.attributes["function_type"]).value)
    inputs = [str(t) for t in ftype.inputs]
    results = [str(t) for t in ftype.results]
    if len(keys) != len(inputs):
        raise ValueError(f"lazy-mlir: {len(keys)} argument keys for a function of "
                         f"{len(inputs)} arguments")
    impl_name = f"{entry}$impl"
    with ctx:
        impl.attributes["sym_name"] = ir.StringAttr.get(impl_name)
        impl.attributes["sym_visibility"] = ir.StringAttr.get("private")

    # The wrapper is written as text, parsed in the same context and moved in.
    # It declares the implementation so that it verifies on its own.
    sig = f"({', '.join(inputs)}) -> ({', '.join(results)})"
    lines, body, args, operands = [], [], [], []
    for i, (key, ty) in enumerate(zip(keys, inputs)):
        if key is None:
            operands.append(f"%a{len(args)}")
            args.append(f"%a{len(args)}: {ty}")
            continue
        held = _builtin(ty)  # (a torch tensor: the global holds its builtin tensor)
        lines.append(f"util.global private @__param_{i} = #flow.parameter.named<"
                     f"{_string(scope)}::{_string(key)}> : {held}")
        body.append(f"  %p{i} = util.global.load @__param_{i} : {held}")
        if held != ty:
            body.append(f"  %t{i} = torch_c.from_builtin_tensor %p{i} : {held} -> {ty}")
        operands.append(f"%t{i}" if held != ty else f"%p{i}")
    lines.append(f"func.func private @{_quote_sym(impl_name)}{sig}")
    lines.append(f"func.func @{_quote_sym(entry)}({', '.join(args)}) -> "
                 f"({', '.join(results)}) {{")
    lines += body
    call = f"func.call @{_quote_sym(impl_name)}({', '.join(operands)}) : {sig}"
    if results:
        lines.append(f"  %r:{len(results)} = {call}")
        lines.append("  return " + ", ".join(f"%r#{i}" for i in range(len(results)))
                     + " : " + ", ".join(results))
    else:
        lines.append(f"  {call}")
        lines.append("  return")
    lines.append("}")
    wrapper = ir.Module.parse("\n".join(lines), ctx)
    for op in list(wrapper.body.operations):
        if op.operation.name == "func.func" and "sym_visibility" in op.attributes and \
                ir.StringAttr(op.attributes["sym_name"]).value == impl_name:
            continue  # the declaration: the definition is already in the module
        op.operation.detach_from_parent()
        module.body.append(op)
    module.operation.verify()
    return str(module)


_TORCH_ELEMENTS = {"si64": "i64", "si32": "i32", "si16": "i16", "si8": "i8"}


def _builtin(ty: str) -> str:
    """A builtin tensor type for a torch one (``!torch.vtensor<[6,?],si64>``
    -> ``tensor<6x?xi64>``: the torch-backend modules of ``export/dynamic.py``);
    any other type as it is."""
    if not ty.startswith("!torch.vtensor<["):
        return ty
    dims, element = ty[len("!torch.vtensor<["):-1].rsplit("],", 1)
    sizes = "".join(f"{d}x" for d in dims.split(",") if d)
    return f"tensor<{sizes}{_TORCH_ELEMENTS.get(element, element)}>"


def _quote_sym(name: str) -> str:
    """A symbol name as MLIR accepts it after ``@``."""
    if name.replace("_", "a").replace("$", "a").replace(".", "a").isalnum() and \
            not name[0].isdigit():
        return name
    return _string(name)


def import_exported_program(program, decomposition_table: dict, func_name: str = "main") -> str:
    """torch dialect text of a ``torch.export.ExportedProgram`` (symbolic sizes
    become ``?`` dimensions), after applying ``decomposition_table``."""
    from torch_mlir.fx import export_and_import
    module = export_and_import(program, decomposition_table=decomposition_table,
                               func_name=func_name)
    return str(module)
