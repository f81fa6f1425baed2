"""The differential fuzzer: README "Tests and benchmarks", ``python -m tests.fuzz --help``."""
