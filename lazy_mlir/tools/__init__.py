"""The ``lazy-mlir`` command line (``cli.main``): demo, dump, compile, export,
run, coverage, cache, doctor. The top layer: it may import any package."""
