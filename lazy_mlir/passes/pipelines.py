"""Pass pipelines as commented lists, joined at the end.

TORCH_BACKEND takes the imported torch dialect (value semantics, from
FxImporter) to torch-mlir's backend contract; LINALG lowers that contract to
linalg-on-tensors, the input IREE compiles.
"""
from __future__ import annotations

TORCH_BACKEND = [
    # FxImporter output -> backend contract: shape/dtype refinement,
    # decomposition of complex ops, lowering of torch.operator leftovers.
    "torchdynamo-export-to-torch-backend-pipeline",
]

LINALG = [
    # torch backend contract -> linalg on tensors (+ tensor, arith, scf, ml_program)
    "torch-backend-to-linalg-on-tensors-backend-pipeline",
]


def as_pipeline(passes: list[str]) -> str:
    return "builtin.module(" + ",".join(passes) + ")"
