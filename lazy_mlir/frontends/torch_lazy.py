"""PyTorch's ``torch._lazy`` API acting on lazy-mlir's device.

Code written for PyTorch's Lazy Tensor Core (its tutorial, the seeds'
notebook) calls ``torch._lazy.mark_step()``, ``torch._lazy.wait_device_ops()``
and ``torch._lazy.metrics.counter_names() / counter_value() / reset() /
metrics_report()``. Those are thin Python functions over ``torch._C._lazy``,
which drives PyTorch's own TorchScript lazy backend. ``install()`` (run by
``import lazy_mlir``) replaces them, at the Python module level, by
lazy-mlir's own: such code then runs on lazy-mlir with one changed line,
``import lazy_mlir`` instead of ``torch._lazy.ts_backend.init()``.

Only those six names change; the rest of ``torch._lazy`` (``ts_backend``,
``get_tensor_id``, ...) is untouched. A name bound before the install
(``from torch._lazy.metrics import counter_names``) keeps PyTorch's function.
``uninstall()`` puts PyTorch's functions back; ``installed()`` says which
are in place. ``LAZY_MLIR_TORCH_LAZY_API=0`` before ``import lazy_mlir``
leaves ``torch._lazy`` alone.
"""
from __future__ import annotations

import os

from .. import metrics

_saved: dict[tuple[str, str], object] = {}  # (module, name) -> PyTorch's function


def mark_step(device: str = "", wait: bool = False) -> None:
    """``torch._lazy.mark_step`` on lazy-mlir: launch the pending graph;
    with ``wait``, also wait for it (``device`` is accepted, one device)."""
    from ..lazy.sync import mark_step as launch, wait_device_ops as join
    launch()
    if wait:
        join()


def wait_device_ops(devices=None) -> None:
    """``torch._lazy.wait_device_ops`` on lazy-mlir: block until every
    launched graph ran (``devices`` is accepted, one device)."""
    from ..lazy.sync import wait_device_ops as join
    join()


def _replacements() -> dict[tuple[str, str], object]:
    return {
        ("torch._lazy", "mark_step"): mark_step,
        ("torch._lazy", "wait_device_ops"): wait_device_ops,
        ("torch._lazy.metrics", "reset"): metrics.reset,
        ("torch._lazy.metrics", "counter_names"): metrics.counter_names,
        ("torch._lazy.metrics", "counter_value"): metrics.counter_value,
        ("torch._lazy.metrics", "metrics_report"): metrics.metrics_report,
    }


def requested() -> bool:
    """Whether ``LAZY_MLIR_TORCH_LAZY_API`` allows the install (default: yes)."""
    return os.environ.get("LAZY_MLIR_TORCH_LAZY_API", "1").strip().lower() not in (
        "0", "false", "no", "off")


def install() -> bool:
    """Point ``torch._lazy``'s six functions at lazy-mlir; idempotent.
    False (nothing changed) when ``torch._lazy`` cannot be imported."""
    import importlib
    try:
        modules = {m: importlib.import_module(m) for m in ("torch._lazy", "torch._lazy.metrics")}
    except ImportError:
        return False
    for (module, name), fn in _replacements().items():
        current = getattr(modules[module], name)
        if current is not fn:
            _saved.setdefault((module, name), current)
            setattr(modules[module], name, fn)
    return True


def uninstall() -> None:
    """Put PyTorch's own functions back."""
    import sys
    for (module, name), fn in list(_saved.items()):
        setattr(sys.modules[module], name, fn)
        del _saved[(module, name)]


def installed() -> bool:
    """Whether every one of the six names is lazy-mlir's."""
    import sys
    return all(getattr(sys.modules.get(m), n, None) is fn
               for (m, n), fn in _replacements().items())
