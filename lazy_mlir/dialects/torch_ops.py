"""What torch-mlir's Python package says about aten ops, for ``ops/``
(the only layer allowed to read torch-mlir is this one).

- ``aten_op_names()``: the aten ops the torch dialect defines (``add.Tensor``
  form, default overloads without a suffix), from torch-mlir's generated op
  classes.
- ``torch_mlir_decompositions()``: torch-mlir's recommended decomposition
  table (core aten decompositions minus those torch-mlir lowers itself).

Both are read once per process; callers must not mutate the returned table.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def aten_op_names() -> frozenset[str]:
    from torch_mlir.dialects import _torch_ops_gen
    names = set()
    for obj in vars(_torch_ops_gen).values():
        name = getattr(obj, "OPERATION_NAME", None)
        if isinstance(name, str) and name.startswith("torch.aten."):
            names.add(name[len("torch.aten."):])
    return frozenset(names)


@functools.lru_cache(maxsize=1)
def torch_mlir_decompositions() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table
    return get_decomposition_table()
