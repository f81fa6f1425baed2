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

``scan`` is a recurrence over time steps on top of ``fori``: per-step
inputs and outputs as time-major tensors, unrolled or as loops, and from
``NEST_STEPS`` steps as two loops, an outer one over blocks of steps
(``block_size`` says why).
"""
from __future__ import annotations

import contextlib
import contextvars
import math

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


# A loop over at least this many steps is two loops deep (``scan``).
NEST_STEPS = 16


def block_size(n: int) -> int | None:
    """Steps per block of a nested ``scan`` over ``n`` steps (None: one
    loop). IREE copies every tensor a host loop carries into a new buffer
    each iteration (3.13: even a ``tensor.insert_slice`` into the carry), so
    a loop that writes its steps' outputs into an ``[n, ...]`` carry copies
    ``n * n`` rows; in blocks of ``k`` steps (an inner loop carries a block,
    the outer loop the whole) it copies ``n * k + n * n / k`` rows, least
    near ``k = sqrt(n)``: at ``n = 128``, ``k = 16``, 3,072 rows against
    16,384. A divisor of ``n`` near ``sqrt(n)`` if there is one (no tail
    block), the larger of two equally near."""
    if n < NEST_STEPS:
        return None
    root = math.sqrt(n)
    divisors = [k for k in range(2, n) if n % k == 0 and root / 2 <= k <= 2 * root]
    if divisors:
        return min(divisors, key=lambda k: (abs(math.log(k / root)), -k))
    return round(root)


def scan(step, n: int, carries, xs=(), consts=(), ys_shapes=(), reverse: bool = False,
         unroll: bool = False, block: int | None = 0):
    """``(carries, ys)`` after ``carries, y = step(carries, x, consts)`` for
    the times ``t`` = 0 .. n-1 (n-1 .. 0 if ``reverse``), ``x`` being row
    ``t`` of each of ``xs`` (time-major ``[n, ...]`` tensors) and ``y`` the
    step's rows, one per ``ys_shapes`` (a row's shape): ``ys`` stacks them
    time-major, ``[n, *shape]`` each. ``step`` gets and returns tuples and
    must close over no tensor (pass them in ``consts``: they go through the
    loops unchanged).

    ``unroll``: a Python loop at every step, traced or not (``xs`` may be
    lists of per-step tensors; ``ys`` are lists). Otherwise counted loops
    (``fori``): one over the steps, or, from ``NEST_STEPS`` steps on, an
    outer loop over blocks of ``block_size(n)`` steps (``block``: another
    size; None: one loop) and an inner one over a block's steps, which
    gathers the block's rows of ``xs`` and writes its ``ys`` rows into the
    whole once per block (``block_size`` says why)."""
    carries, xs, consts = tuple(carries), tuple(xs), tuple(consts)
    if unroll:
        ys = [[None] * n for _ in ys_shapes]
        for s in range(n):
            t = (n - 1) - s if reverse else s
            carries, y = step(carries, tuple(x[t] for x in xs), consts)
            for buf, v in zip(ys, y):
                buf[t] = v
        return tuple(carries), ys
    like = carries[0]
    ys = [like.new_zeros((n, *shape)) for shape in ys_shapes]
    k = block_size(n) if block == 0 else block
    if k is None or k >= n:
        return _scan_block(step, n, carries, xs, consts, ys, reverse)
    blocks, tail = divmod(n, k)
    nc, ny, nx = len(carries), len(ys), len(xs)

    def outer(j, *state):
        carries, ys = state[:nc], state[nc:nc + ny]
        xs, consts = state[nc + ny:nc + ny + nx], state[nc + ny + nx:]
        start = (n - k) - j * k if reverse else j * k
        index = start + torch.arange(k, dtype=torch.int64, device=j.device)
        xb = tuple(x.index_select(0, index) for x in xs)
        yb = [y.new_zeros((k, *y.shape[1:])) for y in ys]
        carries, yb = _scan_block(step, k, carries, xb, consts, yb, reverse)
        ys = [y.index_put((index,), b) for y, b in zip(ys, yb)]
        return (*carries, *ys, *xs, *consts)

    out = fori(blocks, outer, (*carries, *ys, *xs, *consts))
    carries, ys = out[:nc], list(out[nc:nc + ny])
    if tail:  # the first ``tail`` steps reversed, the last ones otherwise
        start = 0 if reverse else blocks * k
        xb = tuple(x[start:start + tail] for x in xs)
        yb = [y.new_zeros((tail, *y.shape[1:])) for y in ys]
        carries, yb = _scan_block(step, tail, carries, xb, consts, yb, reverse)
        ys = [y.slice_scatter(b, 0, start, start + tail) for y, b in zip(ys, yb)]
    return tuple(carries), ys


def _scan_block(step, n, carries, xs, consts, ys, reverse):
    """``scan`` over ``n`` steps as one counted loop, writing into ``ys``
    (``[n, ...]`` tensors)."""
    nc, ny, nx = len(carries), len(ys), len(xs)

    def body(i, *state):
        carries, ys = state[:nc], state[nc:nc + ny]
        xs, consts = state[nc + ny:nc + ny + nx], state[nc + ny + nx:]
        t = at(i, n, not reverse)
        carries, y = step(tuple(carries), tuple(take(x, t) for x in xs), tuple(consts))
        return (*carries, *[put(b, t, v) for b, v in zip(ys, y)], *xs, *consts)

    out = fori(n, body, (*carries, *ys, *xs, *consts))
    return tuple(out[:nc]), list(out[nc:nc + ny])
