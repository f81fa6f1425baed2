"""Model zoos built from code and configs (nothing is downloaded).

- ``sweep``: the sweep's entries: every ``transformers`` architecture of the
  installed version that a task mapping lists, at a tiny size derived
  mechanically from its default config (``hf_tiny``), and ``torch.nn``
  building blocks, one small model per layer family (``nn_blocks``).

This package imports torch (and ``transformers`` when a ``transformers``
entry is built), nothing of lazy-mlir: the runner (``tools/sweep.py``),
tests and benchmarks train its models on any device.
"""
