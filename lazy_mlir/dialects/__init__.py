"""The only package that imports torch-mlir's MLIR Python bindings.

- ``torch_import``: MLIR contexts with the torch dialect, parsing, and
  ``import_fx`` (an fx graph to torch dialect through torch-mlir's FxImporter).
- ``runner``: ``run_pipeline`` applies a pass pipeline; on failure it writes a
  repro (input IR and a ready-to-run command) and raises ``PipelineError``.
- ``linalg_edit``: small in-place edits of a linalg module for project passes.
- ``export_import``: parameters as IREE globals, and ``torch.export`` import.

Imports only the layers below it: ``graph`` and ``metrics``/``config``/``targets``.
"""
