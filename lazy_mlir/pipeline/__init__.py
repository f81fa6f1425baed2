"""Stage objects from a captured graph to a compiled IREE module."""
