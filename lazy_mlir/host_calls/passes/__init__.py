"""Host calls, the passes layer: the rewrites into calls of an import
module's functions. See ``lazy_mlir.host_calls``."""
