"""Errors shared by the ``lazy-mlir`` commands."""
from __future__ import annotations


class UsageError(Exception):
    """A user mistake: reported in one line, exit code 2."""
