"""Index values already on the host: checked at capture (``bounds.guard``).

An index whose values are host data (a CPU tensor, data moved with
``.to('lazy')``), or a few moves of such data away (``ids.view(-1)``), is
checked at once and raises what eager raises, at the line that called the
op; what passed is remembered, so the same batch is read once.
"""
from __future__ import annotations

import weakref

import torch

from ..graph import argtree
from ..graph import debug
from ..graph.ir import Value
from .state import bounds_mode as _state, host_checks_passed as _passed

aten = torch.ops.aten


# Ops that only move or convert values: an index made by them from host data
# (``i.view(-1)``, ``i.long()``) is computed on the host, as cheap as a copy.
_MOVES = {getattr(aten, p).default for p in (
    "view", "_unsafe_view", "reshape", "expand", "clone", "alias", "permute", "t", "_to_copy",
    "unsqueeze")} | {aten.slice.Tensor, aten.select.int, aten.squeeze.dim, aten.transpose.int,
                     aten.flatten.using_ints}


# Of those, the ones whose values are some of their input's (all but the
# conversion): an index they select from host data is in range when the data is.
_SELECTS = _MOVES - {aten._to_copy.default}

# Moves that also add a constant, known from the node: ``x + 0``
# (transformers' GPT-2 positions, ``arange(n) + past_seen_tokens``) and
# ``pad(labels, value=ignore_index)`` (its causal-LM loss shifting the labels).
_ADDS = (aten.add.Tensor, aten.sub.Tensor)
_PAD = aten.constant_pad_nd.default


def _is_move(node) -> bool:
    op = node.op
    if op in _MOVES or op is _PAD:
        return True
    if op in _ADDS:  # of an int 0, no alpha (a lifted number is a second input)
        flat = node.flat
        return len(flat) == 2 and type(flat[1]) is int and flat[1] == 0
    return False


def _selects(node, n: int, lo: int, ignore) -> bool:
    """Whether every value ``node`` makes is one of its input's, or one that
    passes the check ``[lo, n)`` / ``ignore`` itself (a pad value)."""
    op = node.op
    if op is _PAD:
        value = node.flat[-1] if len(node.tree[1]) == 3 else 0  # (by position or name)
        return type(value) in (int, float) and float(value).is_integer() and (
            value == ignore or lo <= value < n)
    return op in _SELECTS or op in _ADDS


def _host_chain(i, depth: int = 6):
    """(host tensor, [the move Values from it to ``i``, first to last]) when
    the index's values are on the host already or a few moves of host data
    away, else None."""
    if isinstance(i, torch.Tensor):
        return i, []
    chain = []
    while True:
        d = i.data
        if d is not None:
            if _state["in_graph"] or d.host is None or d.future is not None:
                return None
            chain.reverse()
            return d.host, chain
        node = i.node
        if len(chain) == depth or not _is_move(node) or len(node.inputs) != 1:
            return None
        chain.append(i)
        i = node.inputs[0]


def _apply_moves(host: torch.Tensor, chain: list) -> torch.Tensor:
    for v in chain:
        node = v.node
        args, kwargs = argtree.unflatten([host if type(a) is Value else a for a in node.flat],
                                         node.tree)
        out = node.op(*args, **kwargs)
        host = out[v.index] if isinstance(out, (list, tuple)) else out
    return host


def _host_of(i):
    """The index's values when they are on the host already (or a few
    moves of host data away), else None."""
    found = _host_chain(i)
    return None if found is None else _apply_moves(*found)


def _location() -> str:
    """Where the op was called: a stack walk (~0.5 us on a transformers
    model's stack; the line must be read now, while the frame is on it)."""
    return debug.user_location() or "a line outside this thread (autograd)"


# Host index tensors that passed a check, with the range they passed: a
# training loop checks the same batch in embedding's and nll_loss's forward
# and backward, and a CPU index tensor is often reused. ``_version`` moves
# on any in-place write, so a changed tensor is checked again. Keyed by id
# (a tensor's ``==`` is elementwise), each entry dropped with its tensor.
# (``_passed``: id -> (weakref, set of ranges), in state.py.)
def _passed_before(host: torch.Tensor, key: tuple) -> bool:
    entry = _passed.get(id(host))
    return entry is not None and entry[0]() is host and key in entry[1]


def _remember(host: torch.Tensor, key: tuple) -> None:
    i = id(host)
    entry = _passed.get(i)
    if entry is None or entry[0]() is not host:
        entry = _passed[i] = (weakref.ref(host, lambda _, i=i: _passed.pop(i, None)), set())
    entry[1].add(key)


def _first_bad(host: torch.Tensor, n: int, lo: int, ignore):
    """The first value of ``host`` outside [lo, n) (``ignore`` excepted), or None."""
    lo_v, hi_v = torch.aminmax(host)
    if lo_v.item() >= lo and hi_v.item() < n:  # masking ``ignore`` costs more: only now
        return None
    h = host if ignore is None else host[host != ignore]
    bad = h[(h < lo) | (h >= n)].flatten()
    return bad[0].item() if bad.numel() else None


def _host_check(func, iv, n, lo, ignore, d, exc, fmt) -> bool:
    """Check the index ``iv`` now if its values are on the host, raising
    eager's error for one outside [lo, n); False when they are not.

    An index selected from host data by moves (``ids.view(-1)``,
    ``labels[..., 1:]``) is in range when all the data is: the data is
    checked (once, then remembered) instead of the index being computed on
    the host at every op; only data with a bad value somewhere, or an index
    converted on the way (``_to_copy``), has the index itself computed."""
    found = _host_chain(iv)
    if found is None:
        return False
    root, chain = found
    if root.numel() == 0:
        return True
    bad = None
    if any(v.node.op is _PAD and not _selects(v.node, n, lo, ignore) for v in chain):
        pass  # (a pad value out of range: the data passing says nothing of the index)
    else:
        key = (n, lo, ignore, root._version)
        if _passed_before(root, key):
            return True
        if all(_selects(v.node, n, lo, ignore) for v in chain):
            bad = _first_bad(root, n, lo, ignore)
            if bad is None:
                _remember(root, key)
                return True
    if chain:
        host = _apply_moves(root, chain)
        bad = _first_bad(host, n, lo, ignore) if host.numel() else None
    if bad is not None:
        name = str(func).replace(".default", "")
        raise exc(f"{fmt.format(v=bad, d=d, n=n)} (lazy-mlir: {name}, valid "
                  f"range [{lo}, {n}), captured at {_location()})")
    return True
