"""Named pass pipelines and the project's own passes, per target.

- ``pipelines``: torch-mlir's pipelines as commented lists of pass strings,
  with a ``PipelineConfig``'s extra passes; ``validate_config``.
- fx-level rewrites chosen by target: ``conv_matmul`` (im2col + matmul),
  ``pool_elementwise``, ``channels_last_pointwise``, ``normalize_dims``,
  ``float_eq``, ``bool_compare``, ``float_scalars``, ``mixed_precision`` (bf16).
- MLIR-level: ``conv_channels_last``, ``data_tiling`` and ``strided_transposes`` (linalg, through
  ``dialects.linalg_edit``), ``bitcast`` (``view(dtype)`` in torch-dialect text for IREE's torch input).

Passes run MLIR only through ``dialects``; they import nothing above ``ops``.
"""
