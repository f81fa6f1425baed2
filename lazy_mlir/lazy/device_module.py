"""``torch.lazy``: the runtime module of the ``lazy`` device.

Device-generic PyTorch code reaches a device's runtime through
``torch.get_device_module(type)`` (= ``getattr(torch, type)``):
``torch.utils.checkpoint`` saves and restores the device's random state
through it, ``torch.random.fork_rng(device_type=...)`` forks it, and
training scripts call ``torch.<device>.synchronize()`` or ``.manual_seed()``.
``register()`` (run by ``import lazy_mlir``) makes this module ``torch.lazy``
with ``torch._register_device_module``, PyTorch's way for out-of-tree
devices.

The random state: every random number a lazy tensor gets is drawn from
PyTorch's CPU generator (``torch.default_generator``): the fills
(``normal_``, ``uniform_``, ``bernoulli_``, ...) are drawn on the host
exactly as eager CPU draws them, and dropout's in-graph bits are keyed by a
64-bit seed drawn from that generator when the op is recorded
(``lazy/random.py``). So the lazy device's random state IS the CPU
generator's state: ``get_rng_state`` returns it, ``set_rng_state`` restores
it (and with it every random op recorded afterwards: a recomputed dropout
draws the mask its first run drew), and ``manual_seed`` seeds it, which
reseeds the CPU stream too (as ``torch.manual_seed`` does). There is one
lazy device, ``lazy:0``.
"""
from __future__ import annotations

import torch

from . import recompute
from .sync import wait_device_ops

__all__ = ["is_available", "device_count", "current_device", "set_device", "device",
           "synchronize", "is_initialized", "get_rng_state", "set_rng_state",
           "get_rng_state_all", "set_rng_state_all", "manual_seed", "manual_seed_all",
           "seed", "seed_all", "initial_seed"]

_TYPE = "lazy"


def _index(device) -> int:
    """The device index ``device`` names (an int, ``"lazy"``, ``"lazy:0"``,
    a ``torch.device``, or None: the current one); raises for another type
    or index, since there is only ``lazy:0``."""
    if device is None:
        return 0
    if isinstance(device, int):
        index = device
    else:
        device = torch.device(device)
        if device.type != _TYPE:
            raise ValueError(f"lazy-mlir: expected a lazy device, got {device}")
        index = 0 if device.index is None else device.index
    if index not in (0, -1):  # (-1: "the current device", as CUDA's helpers pass it)
        raise ValueError(f"lazy-mlir: there is one lazy device (lazy:0), not lazy:{index}")
    return 0


def is_available() -> bool:
    """True: the lazy device runs wherever lazy-mlir is imported."""
    return True


def device_count() -> int:
    """One lazy device."""
    return 1


def current_device() -> int:
    """The index of the current lazy device: always 0."""
    return 0


def set_device(device) -> None:
    """Select ``device`` (only ``lazy:0`` exists; anything else raises)."""
    _index(device)


_initialized = True
"""Read by ``torch.utils.checkpoint``: a device module that is initialized has
its random state saved in the forward and restored for the recompute (the
state is the CPU generator's, restored by checkpoint anyway; the call marks
the recompute, ``recompute.py``)."""


def is_initialized() -> bool:
    return True


class device:
    """Context manager selecting a lazy device, as ``torch.cuda.device``:
    with one device it only checks the index (``torch.utils.checkpoint``
    wraps its RNG saves and restores in one)."""

    def __init__(self, device):
        self.idx = _index(device)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


def synchronize(device=None) -> None:
    """Block until every graph launched on the lazy device has run (what
    ``lm.wait_device_ops()`` does); raise the error of a graph that failed.
    Pending, unlaunched work stays pending: ``lm.mark_step()`` launches it."""
    _index(device)
    wait_device_ops()


def get_rng_state(device="lazy") -> torch.Tensor:
    """The lazy device's random state (a CPU ``uint8`` tensor): the CPU
    generator's, from which every lazy random op draws."""
    _index(device)
    return torch.default_generator.get_state()


def set_rng_state(new_state: torch.Tensor, device="lazy") -> None:
    """Restore a state from ``get_rng_state``: random ops recorded from now
    on draw what they drew after it was taken."""
    _index(device)
    torch.default_generator.set_state(new_state)
    recompute.on_set_rng_state()  # a checkpoint's recompute starts or ends


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state()]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seed the lazy device's random numbers (the CPU generator, shared)."""
    torch.default_generator.manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def seed() -> None:
    """Seed the lazy device's random numbers with a non-deterministic number."""
    torch.default_generator.seed()


def seed_all() -> None:
    seed()


def initial_seed() -> int:
    """The seed the lazy device's random numbers were last seeded with."""
    return torch.default_generator.initial_seed()


def register() -> None:
    """Make this module ``torch.lazy`` (idempotent; a ``torch.lazy`` that is
    another module raises, as ``torch._register_device_module`` does)."""
    import sys
    this = sys.modules[__name__]
    if getattr(torch, _TYPE, None) is this:
        return
    torch._register_device_module(_TYPE, this)
