"""Front ends: the ways a user reaches the compiler, above capture.

- ``jit``: ``lm.jit(fn).lower(*args).compile(target)``, the staged API.
- ``train_step``: ``lm.compile_train_step``, a whole training step replayed.
- ``dynamo`` + ``aot_graph``: the ``torch.compile(backend="lazy_mlir")`` backend.
- ``torch_lazy``: ``torch._lazy``'s mark_step, wait_device_ops and metrics on lazy-mlir.
- ``debug``: ``lm.debug`` (recompile explanations, graph pictures, how an op
  is lowered).

``lazy_mlir.export`` (ahead-of-time artifacts) sits one layer above these.
"""
