"""fx graph -> torch dialect, through torch-mlir's FxImporter."""
from __future__ import annotations

import torch.fx as fx
from torch_mlir import ir
from torch_mlir.dialects import func as func_d  # noqa: F401 (for linalg_edit)
from torch_mlir.dialects import torch as torch_d
from torch_mlir.extras.fx_importer import FxImporter


def new_context() -> ir.Context:
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    return ctx


def import_fx(gm: fx.GraphModule, func_name: str = "main") -> ir.Module:
    """The torch-dialect module of ``gm`` (value semantics, one function)."""
    imp = FxImporter(context=new_context())
    imp.import_stateless_graph(gm.graph, func_name=func_name)
    return imp.module


def parse(text: str) -> ir.Module:
    return ir.Module.parse(text, new_context())
