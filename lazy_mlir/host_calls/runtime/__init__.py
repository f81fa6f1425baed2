"""Host calls, the runtime layer: the import modules that serve the calls,
the OpenMP team they run on, and which calls a module compiled for this
process may make. See ``lazy_mlir.host_calls``."""
