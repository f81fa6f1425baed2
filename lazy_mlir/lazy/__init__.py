"""Capture: lazy tensors, recording aten ops as graph nodes, routing, sync.

The modules, bottom to top (each imports only modules listed before it):

- ``tensor``      LazyTensor, Storage, live storages; the hooks set from above
- ``state``       every mutable table capture keeps, and ``reset()``
- ``shapes``, ``views``, ``scalars``, ``empty_inputs``, ``capturable``,
  ``module_ties``: helpers (meta shape inference, view steps, scalar lifting,
  empty-input folding, optimizer and module patches)
- ``kinds``       which kind of op an overload is (functional, view, special, ...)
- ``supported``   what the compiler takes; the fallback log
- ``bounds``      index and divisor checks (guards take ``emit`` as an argument)
- ``capture``     recording: values, ``emit``, ``assign``, record plans
- ``random``, ``resize``: in-graph random bits; ``resize_``
- ``sync``        mark_step: cut, compile or reuse, run; ``to_host``
- ``fallback``, ``foreach``, ``decompose``: eager fallback, foreach ops,
  decompositions replayed at capture
- ``collectives`` all-reduce, all-gather, reduce-scatter, broadcast as cut
  points between graphs (``lm.distributed``; ``torch.ops.c10d`` and
  ``_c10d_functional`` ops on lazy tensors are routed there)
- ``dispatch``    routing ``__torch_dispatch__``: ``dispatch``, ``record``, op handlers
- ``backward``    ``loss.backward()`` as one node (PyTorch's compiled autograd)
- ``rnn``         ``nn.LSTM``/``nn.GRU`` as one node each way (AutogradLazy kernels)
- ``attention``   ``F.scaled_dot_product_attention`` as one node each way (AutogradLazy)
- ``linear``      ``F.linear`` as one node (AutogradLazy)
- ``mha``         ``nn.MultiheadAttention``'s self-attention with fewer views (wraps the F function)
- ``device``, ``coverage``, ``render``: the ``lazy`` device's kernels, the
  dry run of ``lm.check_coverage``, pictures of graphs
- ``serialization``, ``device_module``: saving lazy tensors (``torch.save``,
  ``lm.save``, ``lm.serialization``); ``torch.lazy``, the device's runtime
  module (random state, ``synchronize``)
- ``autocast``    ``lm.autocast``: CPU autocast's op policy for lazy tensors, as
  kernels on a borrowed autocast dispatch key (above autograd)

Hooks: ``tensor._dispatch`` (set by ``dispatch``), ``tensor._to_host``
(set by ``sync``), ``tensor._backward`` (set by ``backward``) and
``tensor._reduce`` (set by ``serialization``). Importing this package
imports all four, so they are set before any lazy tensor exists.
"""
from . import backward, dispatch, serialization, sync  # noqa: F401  (the hooks in tensor.py)
