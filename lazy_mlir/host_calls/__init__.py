"""How a compiled module calls PyTorch's own CPU kernels: one feature, one folder.

Three kinds of call exist, each in three steps of the way a graph takes
(each step in the layer it belongs to; ``tests/unit/test_layering.py``
places the subpackages):

- ``ops/`` (below ``lazy_mlir.ops``): when an op's kernel is PyTorch's. The
  switches (``LAZY_MLIR_BLAS``, ``LAZY_MLIR_RNN``, ``LAZY_MLIR_HOST_ATTENTION``),
  the shapes worth a call, and the custom ops the calls stand for
  (``torch.ops.lazy_mlir.host_lstm_layer*``, the host attention ops).
  ``ops/attention.py``, ``ops/rnn.py``.
- ``passes/`` (below ``lazy_mlir.passes``): the rewrites that turn those ops,
  and large f32 matmuls, into calls of an import module's functions
  (``@lazy_mlir_blas.matmul``, ...) that iree-compile leaves as imports.
  ``passes/blas.py``, ``passes/rnn.py``, ``passes/attention.py``; the MLIR
  edit they share is ``lazy_mlir.dialects.torch_calls`` (the dialects
  package is the only importer of the MLIR bindings).
- ``runtime/`` (below ``lazy_mlir.runtime``): the import modules that serve
  the calls on IREE's host buffers (``runtime/blas.py``, ``runtime/rnn.py``,
  ``runtime/attention.py``; ``runtime.session.Session.load`` adds them to a
  module's VM context), the one OpenMP team they run on (``runtime/one_team.py``),
  and which calls a module compiled for THIS process may make
  (``runtime/switches.py``: only in-process cpu sessions; never exports).

``gemm.py`` says whether PyTorch's GEMM beats IREE's on this machine (the
``auto`` default of the BLAS and attention switches).

"Host" means other things elsewhere: ``lazy_mlir.runtime.host_memory`` (the
cpu target's heap settings) and ``lazy_mlir.lazy.host_index`` (index checks
read on the host) are not host calls.
"""
