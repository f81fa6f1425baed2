"""Mark a module that waits on the host mid-run (a linalg-stage pass, cpu only).

A ``util.optimization_barrier`` (``conv_channels_last``'s filter barriers,
``loop_matmuls``') becomes a host wait in IREE's stream: the VM waits for
the work before it. Modules that wait so were the ones IREE's ``local-task``
driver leaked from: the medium ResNet's plain step module kept 56 MB more of
the heap after every call (~22 MB a training step; IREE's allocator counted
none of it), none on ``local-sync``, as modules with host calls did
(``runtime/session.py``). The session reads a module's waits from its vmfb,
which keeps the name of an exported function: this pass adds an empty one.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E

NAME = "lazy_mlir_host_waits"
"""The empty exported function (``runtime.session.HOST_WAITS_MARK``)."""

MARK = "func.func @" + NAME
"""How the mark reads in the printed module."""


def mark_host_waits(module) -> int:
    """Give a module with a ``util.optimization_barrier`` the empty export
    ``NAME``; returns 1 if marked."""
    if not E.ops_named(module, "util.optimization_barrier"):
        return 0
    E.add_functions(module, MARK + "() {\n  return\n}\n")
    return 1
