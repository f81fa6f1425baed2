"""Counted loops for decompositions: ``fori(n, body, carries)``.

A recurrence unrolled over its steps (an LSTM over 128 time steps, forward
and backward, four layers) makes a module of thousands of ops: minutes of
IREE compile at the suite's medium size. ``fori`` keeps it one loop body.

When a decomposition is traced for import (inside ``traced_loops()``, which
``ops/rnn.py``'s IMPORT-scope registrations enter), ``fori`` records
PyTorch's ``while_loop`` higher-order op, which torch-mlir's FxImporter
imports as ``torch.prim.Loop``. Its condition is always ``i < n`` on a
counter that starts at 0 and grows by 1: ``dialects.torch_import`` rewrites
such a loop into a counted one (trip count ``n``, condition true), which
torch-mlir lowers to ``scf.for`` (torch-mlir 20261001 mislowers the
while-form as-is: it drops the condition and loops 2**63 - 1 times).
Elsewhere (the ops' CPU kernels, eager checks) ``fori`` is a Python loop
over the same body, so both paths compute the same thing.

The body takes the counter (a 0-d int64 tensor) and the carries, and
returns new carries of the same shapes; it must close over no tensors (pass
them as carries, returned unchanged): PyTorch's ``while_loop`` traces the
body as a graph of its arguments only. Index by the counter with
``index_select`` / ``index_put`` (a data-dependent ``x[i]`` does not trace).
"""
from __future__ import annotations

import contextlib
import contextvars

import torch

_TRACED = contextvars.ContextVar("lazy_mlir_traced_loops", default=False)


@contextlib.contextmanager
def traced_loops():
    """Within: ``fori`` records a ``while_loop`` op rather than unrolling."""
    token = _TRACED.set(True)
    try:
        yield
    finally:
        _TRACED.reset(token)


def as_traced_loops(fn):
    """``fn`` run inside ``traced_loops()`` (for an IMPORT decomposition)."""
    def traced(*args, **kwargs):
        with traced_loops():
            return fn(*args, **kwargs)
    traced.__name__ = traced.__qualname__ = fn.__name__
    traced.__module__ = fn.__module__
    return traced


def fori(n: int, body, carries: tuple, unroll: bool = False) -> tuple:
    """``carries`` after ``carries = body(i, *carries)`` for ``i`` in ``0..n-1``.

    With ``unroll`` the body runs ``n`` times with a Python ``int`` ``i``,
    traced or not: no loop in the graph, static indices (``at``, ``take``
    and ``put`` take ints, ``put`` a list of per-step values)."""
    carries = tuple(carries)
    if unroll:
        for t in range(n):
            carries = tuple(body(t, *carries))
        return carries
    device = carries[0].device
    if not _TRACED.get():
        for t in range(n):
            carries = tuple(body(torch.tensor(t, dtype=torch.int64, device=device), *carries))
        return carries
    from torch._higher_order_ops.while_loop import while_loop_op

    def cond(i, *_):
        return i < n

    def step(i, *state):
        out = body(i, *state)
        # An output that is an input (a weight passed through) would alias it:
        # while_loop refuses that; a clone folds away in the lowering.
        return (i + 1, *[o.clone() if o is s else o for o, s in zip(out, state)])

    counter = torch.zeros((), dtype=torch.int64, device=device)
    with _shape_env(carries[0]):
        return tuple(while_loop_op(cond, step, (counter, *carries), ())[1:])


@contextlib.contextmanager
def _shape_env(tensor):
    """``while_loop``'s fake-tensor rule needs a ``ShapeEnv``; the pipeline's
    fake mode (``pipeline/fx_graph.py``: static shapes only) has none: lend
    it one for the loop (nothing in it is symbolic)."""
    mode = getattr(tensor, "fake_mode", None)
    if mode is None or mode.shape_env is not None:
        yield
        return
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    mode.shape_env = ShapeEnv()
    try:
        yield
    finally:
        mode.shape_env = None


def at(i, n: int, ascending: bool):
    """The time index a loop's ``i``-th step visits: ``i`` or ``n - 1 - i``,
    as a 1-element index for ``index_select`` / ``index_put`` (an ``int``
    for an ``int`` ``i``: an unrolled loop)."""
    if isinstance(i, int):
        return i if ascending else (n - 1) - i
    return (i if ascending else (n - 1) - i).reshape(1)


def take(x, index):
    """``x[index]`` for a 1-element index tensor (or an ``int``: ``x`` a
    tensor or a list)."""
    if isinstance(index, int):
        return x[index]
    return x.index_select(0, index).select(0, 0)


def put(x, index, value):
    """``x`` with ``x[index] = value`` (functional; ``x`` a list of per-step
    values for an ``int`` index)."""
    if isinstance(index, int):
        x = list(x)
        x[index] = value
        return x
    return x.index_put((index,), value.unsqueeze(0))
