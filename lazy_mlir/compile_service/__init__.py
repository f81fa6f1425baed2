"""The compile service: for a graph, which executable, compiled where, and
what runs meanwhile. One entry, ``lookup.executable_for``, for every way in
(mark_step, ``compile_train_step``, ``lm.jit``'s loader, the Dynamo backend):

- ``executable``: the ``Executable`` protocol (loaded / compiling, running
  eagerly / failed, running eagerly) and the eager fallback of a failed compile;
- ``lookup``: the lookup-or-compile entry, background compiles and the swap,
  loading;
- ``memory_cache``, ``disk_cache``: the in-process and persistent caches;
- ``compile_pool``, ``compile_worker``: compiles in worker processes.

Below it: ``pipeline`` (the one compile path, which only raises) and
``runtime`` (IREE sessions, which only load and run). Kept free of imports
here: a compile worker imports ``compile_worker`` alone.
"""
