"""Host calls, the ops layer: when an op's kernel is PyTorch's (switches,
shapes, the custom ops the calls stand for). See ``lazy_mlir.host_calls``."""
