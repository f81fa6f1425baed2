"""Fixtures of the real-model tests (``lazy_mlir.models.real``)."""
from __future__ import annotations

import pytest

import lazy_mlir as lm


@pytest.fixture(autouse=True)
def _compile_before_running(monkeypatch):
    """Compile counters mean the same whether compiles run in the background
    or not: a cache miss waits for its compile (``LAZY_MLIR_COMPILE=wait``).
    Whatever earlier tests left pending is computed first, so each test's
    counters see only its own graphs."""
    monkeypatch.setenv("LAZY_MLIR_COMPILE", "wait")
    lm.mark_step()
    yield
