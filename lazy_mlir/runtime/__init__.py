"""IREE runtime: sessions, buffers, the compiled-module cache."""
