"""Capturable optimizers (``Adam(..., capturable=True)``) on the lazy device.

torch.optim keeps a step count per parameter. By default it lives on the CPU
and Adam, AdamW, NAdam, ... read it with ``.item()`` to compute their bias
corrections in Python: on the lazy device each step then holds Python floats
that change every step, so ``compile_train_step`` cannot replay it. With
``capturable=True`` the count lives on the parameter's device and the
corrections are tensor ops: one graph serves every step.

torch.optim allows ``capturable`` only on the device types its
``_get_capturable_supported_devices()`` lists (cuda, xpu, hpu, xla and the
privateuse1 backend) and asserts otherwise. ``allow_lazy()`` adds ``lazy`` to
that list, in ``torch.optim.optimizer`` and in every optimizer module that
imported the function by name. The lazy device meets what the list stands
for: the count is a device tensor, and nothing reads it on the host.
"""
from __future__ import annotations

import sys

_NAME = "_get_capturable_supported_devices"


def allow_lazy() -> int:
    """Make torch.optim accept ``capturable=True`` for lazy tensors; returns
    how many modules now use the extended list (0 if torch lacks it)."""
    import torch.optim.optimizer as opt_mod
    original = getattr(opt_mod, _NAME, None)
    if original is None:
        return 0
    original = getattr(original, "__wrapped__", original)  # applied once

    def supported_devices(*args, **kwargs) -> list[str]:
        devices = original(*args, **kwargs)
        return devices if "lazy" in devices else [*devices, "lazy"]

    supported_devices.__wrapped__ = original
    patched = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("torch.optim"):
            continue
        fn = getattr(module, _NAME, None)
        if fn is original or getattr(fn, "__wrapped__", None) is original:
            setattr(module, _NAME, supported_devices)
            patched += 1
    return patched
