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


def validate_config(config) -> None:
    """Parse every pipeline of ``config``: a pass MLIR does not know raises a
    ``ConfigError`` naming it, before anything is compiled."""
    from ..config import ConfigError
    from ..dialects.runner import pipeline_parse_error
    for name, passes in (("torch-backend", torch_backend(config)), ("linalg", linalg(config))):
        error = pipeline_parse_error(as_pipeline(passes))
        if error is not None:
            raise ConfigError(f"the {name} pipeline does not parse: {error} "
                              f"(passes: {', '.join(passes)})")
