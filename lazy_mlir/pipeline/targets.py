"""Targets: IREE compile flags and the runtime driver of each device type."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    backend: str          # --iree-hal-target-backends
    driver: str           # iree.runtime driver
    flags: tuple[str, ...]

    @property
    def cache_key(self) -> str:
        return f"{self.name}:{self.backend}:{' '.join(self.flags)}"


TARGETS = {
    "cpu": Target("cpu", "llvm-cpu", "local-task", (
        "--iree-llvmcpu-target-cpu=host",
        # Keep float64 as float64: IREE demotes it to f32 by default.
        "--iree-input-demote-f64-to-f32=false",
    )),
}


def get_target(name: str | None = None) -> Target:
    name = name or os.environ.get("LAZY_MLIR_TARGET", "cpu")
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"lazy-mlir: unknown target {name!r}; choose one of "
                         f"{', '.join(sorted(TARGETS))}") from None
