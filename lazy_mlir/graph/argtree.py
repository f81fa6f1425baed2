"""Flattening op arguments, fast.

aten arguments nest at most one level (a list of tensors for ``cat``, a list
of optional tensors for ``index``), so a flat list plus a small hashable
description of where lists were replaces ``torch.utils._pytree`` on the
per-op path.
"""
from __future__ import annotations


def flatten(args: tuple, kwargs: dict) -> tuple[list, tuple]:
    """(leaves, tree): each argument is a leaf (None in the tree's shape), a
    list (its length) or a tuple (-1 - length) whose items are leaves."""
    leaves: list = []
    shape: list = []
    # One loop, no helper: a call per argument of every captured op adds up.
    for a in (*args, *kwargs.values()) if kwargs else args:
        t = type(a)
        if t is list or t is tuple:
            shape.append(len(a) if t is list else -1 - len(a))
            leaves.extend(a)
        else:
            shape.append(None)
            leaves.append(a)
    return leaves, (len(args), tuple(shape), tuple(kwargs))


def unflatten(leaves: list, tree: tuple) -> tuple[tuple, dict]:
    n_args, shape, names = tree
    out = []
    i = 0
    for s in shape:
        if s is None:
            out.append(leaves[i])
            i += 1
        elif s >= 0:
            out.append(list(leaves[i:i + s]))
            i += s
        else:
            n = -1 - s
            out.append(tuple(leaves[i:i + n]))
            i += n
    return tuple(out[:n_args]), dict(zip(names, out[n_args:]))
