"""How an aten op reaches the torch dialect (``lm.debug.explain_op`` tells,
for one op and target).

- ``registry.py``: the one decomposition registry (scopes CAPTURE, IMPORT,
  TARGET; explicit priorities; duplicates raise) and ``ReentryGuard``.
- ``support.py``: which ops compile (the torch dialect's list minus
  ``DENIED``), and the capture/import tables built from the registry.
- ``explain.py``: ``explain_op``.
- Decompositions by domain: ``elementwise``, ``half_opmath``, ``precise``, ``special``,
  ``special_gamma`` (+ ``special_tables``), ``bessel``, ``bessel_jy``,
  ``linalg_lu``, ``linalg_det``, ``linalg_cholesky``, ``linalg_qr``,
  ``linalg_matrix_exp`` (not registered), ``sort_scan``, ``reductions``,
  ``index``, ``nn``, ``grid_sample_backward``, ``rnn`` (LSTM/GRU as ``lazy_mlir::`` ops, one node each
  way), ``embedding_bag``, ``distance``, ``random_fills``,
  ``lowering`` (torch-mlir gaps: rank 0, views, pooling variants) and
  ``compile_gaps`` (forms only torch.compile and lm.jit graphs hold).
"""
