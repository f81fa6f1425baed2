"""The only package that imports MLIR Python bindings (torch-mlir and IREE)."""
