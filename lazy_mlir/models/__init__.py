"""Model zoos built from code and configs (nothing is downloaded).

- ``real``: the real-model suite (GPT-2, BERT, ViT, ResNet, an LSTM and a
  Transformer language model, tiny and medium) that tests, benchmarks,
  ``lazy-mlir doctor`` and the Vulkan/CUDA checks train;
- ``seed``: the seed models (MNIST CNN, LeNet-5, MLP) and the digits data
  of the demo, the examples and the first benchmarks;
- ``sweep``: the sweep's entries: every ``transformers`` architecture of the
  installed version that a task mapping lists, at a tiny size derived
  mechanically from its default config (``hf_tiny``), and ``torch.nn``
  building blocks, one small model per layer family (``nn_blocks``).

This package imports torch (and ``transformers`` when a ``transformers``
entry is built), nothing of lazy-mlir: the runner (``tools/sweep.py``),
tests and benchmarks train its models on any device.
"""
