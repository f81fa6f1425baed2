"""Learning rates and momenta as inputs of a replayed training step.

A learning-rate scheduler stepped every step (warmup, cosine, OneCycleLR,
which also cycles Adam's betas and SGD's momentum) changed a value of the
``compile_train_step`` guard at every call: each step recorded again (the
step's Python, ~25 ms for a 7-layer MLP against ~1 ms replayed) and none
replayed. Adam, AdamW and SGD on their fused path (the lazy default) take
their float hyperparameters as graph inputs (``lazy/fused_optim``); while
a step is recorded each is a fresh input, logged with the param-group keys
it is made from. ``bindings`` turns that log into ``Bound`` entries (which
input of the plan, which group, how to make it); the guard then keeps of
those keys only what can change the graph (``structure``: the type, and
whether the value is 0), and each replay binds the group's current values.

Lifted only for torch.optim's own ``Adam``, ``AdamW`` and ``SGD`` (exactly
those classes): a subclass's ``step`` might also read ``group["lr"]`` into a constant of the
graph, which a new value would leave stale. Each binding is checked when
recorded: the group's value made into the input must equal what the kernel
received, else that input stays a guarded constant.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from ..lazy.capture import data_value
from ..lazy.fused_optim import Lifted

_OWN = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


class Bound(NamedTuple):
    pos: int              # in ``_Plan.bound``
    group: int            # in ``optimizer.param_groups``
    keys: tuple[str, ...]
    of: Callable          # the group's values at ``keys`` -> the input's value
    dtype: torch.dtype


def liftable(optimizer) -> bool:
    """Whether the optimizer's step is one whose lifted inputs are all its
    hyperparameters feed (torch.optim's own Adam, AdamW, SGD)."""
    return type(optimizer) in _OWN


def bindings(log: list[Lifted], optimizer, bound: list) -> tuple[Bound, ...]:
    """The ``Bound`` of each logged input the graph reads (``bound``: the
    plan's inputs after the state and the batch) whose group value makes
    exactly the input recorded."""
    if not log or not liftable(optimizer):
        return ()
    groups = optimizer.param_groups
    group_of = {id(p): i for i, g in enumerate(groups) for p in g["params"]}
    at = {id(d): i for i, d in enumerate(bound)}
    out = []
    for e in log:
        gi, pos = group_of.get(id(e.param)), at.get(id(e.data))
        if gi is None or pos is None:
            continue
        b = Bound(pos, gi, e.keys, e.of, e.dtype)
        made = _made(b, groups)
        if made is not None and made.shape == e.data.host.shape and torch.equal(made, e.data.host):
            out.append(b)
    return tuple(out)


def _made(b: Bound, groups) -> torch.Tensor | None:
    try:
        return _host(b, tuple(groups[b.group][k] for k in b.keys))
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def _host(b: Bound, values: tuple) -> torch.Tensor:
    """The input's value made from the group's ``values`` at ``b.keys``."""
    return torch.tensor(b.of(*values), dtype=b.dtype)


def keys(hyper: tuple[Bound, ...]) -> set[tuple[int, str]]:
    """(group, key) of every value the bindings take."""
    return {(b.group, k) for b in hyper for k in b.keys}


def structure(v):
    """What a lifted value leaves in the guard: its type and whether it is
    0 (SGD's momentum of 0 has no buffers; a tuple of betas item by item)."""
    if isinstance(v, (tuple, list)):
        return tuple(structure(x) for x in v)
    return ("lifted", type(v), v == 0) if isinstance(v, (float, int)) else v


def fixed(lifted: set, hyper: tuple[Bound, ...], groups) -> tuple:
    """(group, key, value) of the keys the guard leaves out (``lifted``)
    that ``hyper`` does not bind: checked before each replay."""
    taken = keys(hyper)
    return tuple((g, k, groups[g][k]) for g, k in sorted(lifted - taken) if g < len(groups))


def fixed_hold(fixed_values: tuple, groups) -> bool:
    return all(g < len(groups) and groups[g].get(k) == v for g, k, v in fixed_values)


def bind(hyper: tuple[Bound, ...], groups, bound: list, made: dict) -> None:
    """Each input of ``hyper`` in ``bound`` made from the groups' current
    values (``made``: the plan's last (values, data) per input, reused
    while the values hold, so a constant beta is uploaded once)."""
    for b in hyper:
        g = groups[b.group]
        values = tuple(g[k] for k in b.keys)
        last = made.get(b.pos)
        if last is None or last[0] != values:
            last = made[b.pos] = (values, data_value(_host(b, values)).data)
        bound[b.pos] = last[1]
