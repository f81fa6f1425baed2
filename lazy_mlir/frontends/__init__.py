"""Front ends: the ways a user reaches the compiler, above capture.

- ``jit``: ``lm.jit(fn).lower(*args).compile(target)``, the staged API.
- ``train_step``: ``lm.compile_train_step``, a whole training step replayed.
- ``debug``: ``lm.debug`` (recompile explanations, graph pictures, how an op
  is lowered).

``lazy_mlir.export`` (ahead-of-time artifacts) sits one layer above these.
"""
