"""Fixtures of the end-to-end tests of the ``lazy`` device."""
from __future__ import annotations

import pytest

import lazy_mlir as lm
from e2e_helpers import Counters


@pytest.fixture(autouse=True)
def _flush_pending():
    """Compute whatever earlier tests left pending, so that each test's
    mark_step and counters see only its own graph."""
    lm.mark_step()
    yield


@pytest.fixture
def counters():
    return Counters()
