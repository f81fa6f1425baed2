"""Pass pipelines as commented lists, joined at the end.

``torch_backend`` takes the imported torch dialect (value semantics, from
FxImporter) to torch-mlir's backend contract; ``linalg`` lowers that contract
to linalg-on-tensors, the input IREE compiles. Both honour the extra passes
and options of a ``PipelineConfig``.
"""
from __future__ import annotations


def torch_backend(config) -> list[str]:
    options = ""
    if config.backend_legal_ops:
        options = "{backend-legal-ops=" + ",".join(config.backend_legal_ops) + "}"
    return [
        *config.torch_backend_before,
        # FxImporter output -> backend contract: shape/dtype refinement,
        # decomposition of complex ops, lowering of torch.operator leftovers.
        "torchdynamo-export-to-torch-backend-pipeline" + options,
        *config.torch_backend_after,
    ]


def linalg(config) -> list[str]:
    return [
        # torch backend contract -> linalg on tensors (+ tensor, arith, scf, ml_program)
        "torch-backend-to-linalg-on-tensors-backend-pipeline",
        *config.linalg_after,
    ]


def as_pipeline(passes: list[str]) -> str:
    return "builtin.module(" + ",".join(passes) + ")"
