"""Recurrent layers (``nn.LSTM``, ``nn.GRU``) as one node each way.

``aten::lstm`` and ``aten::gru`` are CompositeImplicitAutograd: PyTorch
decomposes them into each time step's ops before ``__torch_dispatch__``
sees them, forward and backward (a 2-layer LSTM over 32 steps records
~3,200 ops per training step). The lazy device records them instead as the
ops defined here (``lazy/rnn.py`` routes them, under an autograd function):

- ``lazy_mlir::lstm`` / ``lazy_mlir::gru``: the whole forward (every layer and
  direction) as one list: the output and final states, then what the
  backward reads: each layer's output (time-major) and one "pack" per
  direction, time-major (each step's LSTM gate activations and cell state,
  the GRU's gates and the state the step starts from), or, for a
  recurrence short enough to unroll (``unrolled``), one pack per direction
  and step;
- ``lazy_mlir::lstm_backward`` / ``lazy_mlir::gru_backward``: the gradients
  of the input, the initial states and every parameter (in ``params``
  order), as one list. The weight gradients are one matmul over all steps
  (``dgates^T @ inputs``), not a sum of one term per step.

Both become aten ops on the fx graph before torch-mlir imports it (IMPORT
scope, below): each layer and direction is one ``loops.scan`` over the time
steps (counted loops: ``while_loop``s that become ``scf.for``; from
``loops.NEST_STEPS`` steps an outer loop over blocks of steps around an
inner one), whose body is one step of the recurrence as PyTorch's own
decomposition (``torch._decomp``'s ``lstm_impl``) writes it, or of
back-propagation through time written out; or, when the node says
``unroll`` (short recurrences: ``unrolled`` says why), the same body called
once per step with static indices. Unrolled, a 4-layer LSTM over 128 steps was a module
of ~10,000 ops and minutes of IREE compile; as loops the module has the
same size at every sequence length. The same functions, their loops run in
Python, are the ops' CPU kernels (a graph denied at run time still runs),
and their shapes come from ``register_fake``.

Parameters come as ``nn.LSTM`` flattens them: per layer and direction
``w_ih, w_hh[, b_ih, b_hh][, w_hr]`` (``w_hr``: LSTM projections, when
``hx``'s last size differs from ``cx``'s). Internally time-major; dropout
between layers is not handled here (``lazy/rnn.py`` sends it down
PyTorch's path).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..host_calls.ops import rnn as rnn_host
from .loops import as_traced_loops, scan
from .registry import IMPORT, register_decomposition

_CONFIG = "bool has_biases, int num_layers, bool bidirectional, bool batch_first, bool unroll"
_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")  # (other modules may add ops)
# ``workspace``: the float32 length of one layer and direction's oneDNN
# workspace (``host_calls/ops/rnn.py``), one more saved output per layer and
# direction after the packs; 0: none. With one, the backward's ``saved`` ends
# with the forward's ``hy`` and ``cy`` (which the loops do not read).
_LSTM_CONFIG = _CONFIG + ", int workspace=0"
_LIB.define(f"lstm(Tensor input, Tensor hx, Tensor cx, Tensor[] params, {_LSTM_CONFIG}) -> "
            "Tensor[]")
_LIB.define("lstm_backward(Tensor? grad_output, Tensor? grad_hy, Tensor? grad_cy, Tensor input, "
            f"Tensor hx, Tensor cx, Tensor[] params, Tensor[] saved, {_LSTM_CONFIG}) -> "
            "Tensor[]")
_LIB.define(f"gru(Tensor input, Tensor hx, Tensor[] params, {_CONFIG}) -> Tensor[]")
_LIB.define("gru_backward(Tensor? grad_output, Tensor? grad_hy, Tensor input, Tensor hx, "
            f"Tensor[] params, Tensor[] saved, {_CONFIG}) -> Tensor[]")

ops = torch.ops.lazy_mlir


# A recurrence of at most this many direction-steps (time steps x layers x
# directions) is unrolled; longer ones are loops. See ``unrolled``.
UNROLL_STEPS = 64


def unrolled(steps: int, num_layers: int, dirs: int) -> bool:
    """Whether an RNN of ``steps`` time steps, ``num_layers`` layers and
    ``dirs`` directions is unrolled over time rather than one counted loop
    per layer and direction, each way.

    A loop keeps the module the same size at every length (the suite's
    medium LSTM, 4 layers x 128 steps: 33 s to the first step, against 594 s
    unrolled). But IREE runs an ``scf.for`` from the host, and each
    iteration is its own queue allocation, command buffer and submission,
    and copies the loop's stacked carries (every step's ``h`` and pack,
    written one step at a time) whole into a new buffer: measured on the
    suite's tiny LSTM (32 steps, 2 layers, hidden 64; 13 dispatches and 2
    copies an iteration) the replayed training step's module took 6.9-7.2
    ms of CPU looped against 2.3 ms unrolled (``iree-benchmark-module``,
    local-task, 2 threads; 4.2 against 1.5 ms on local-sync): ~37 us per
    iteration, 128 iterations a step. Unrolling costs compile time instead,
    which grows faster than the saving (the step graph's fx tracing plus
    ``iree-compile``, on a loaded machine): at 64 direction-steps (the tiny
    LSTM) ~37 s against ~10 s looped, for 4.7 ms less CPU a step; at 128
    (64 time steps) ~113 s against ~15 s, for ~11 ms (15-18 against 5.2-5.4
    ms). So only short recurrences, where the loop's overhead is most of
    the step and the extra compile stays in tens of seconds, are unrolled:
    at most ``UNROLL_STEPS`` (64) direction-steps.

    Unrolled, the saved packs are one tensor per direction and step (the
    backward's dispatches read each at offset 0, so IREE compiles one
    executable for all the steps)."""
    return steps * num_layers * dirs <= UNROLL_STEPS


def _groups(params, has_biases: bool, proj: bool) -> list[tuple]:
    """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` per layer and direction (None where absent)."""
    size = 2 + 2 * has_biases + proj
    out = []
    for k in range(0, len(params), size):
        g = params[k:k + size]
        b_ih, b_hh = (g[2], g[3]) if has_biases else (None, None)
        out.append((g[0], g[1], b_ih, b_hh, g[-1] if proj else None))
    return out


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _previous(seq, first, reverse: bool):
    """Each step's previous state: ``first`` then ``seq`` shifted by one
    (``seq`` a tensor, time-major, or a list of steps)."""
    if isinstance(seq, list):
        return seq[1:] + [first] if reverse else [first] + seq[:-1]
    if reverse:
        return torch.cat([seq[1:], first.unsqueeze(0)], 0)
    return torch.cat([first.unsqueeze(0), seq[:-1]], 0)


def _directions(bidirectional: bool):
    return (False, True) if bidirectional else (False,)


def _layer_inputs(x, hiddens, num_layers, dirs):
    """The input of each layer: ``x``, then the previous layer's directions side by side."""
    inputs = [x]
    for layer in range(num_layers - 1):
        k = layer * dirs
        inputs.append(torch.cat([hiddens[k + d] for d in range(dirs)], -1) if dirs > 1
                      else hiddens[k])
    return inputs


def _to_time_major(t, batch_first):
    return t.transpose(0, 1) if batch_first else t


def _split(g, dirs):
    return list(g.chunk(dirs, -1)) if dirs > 1 else [g]


def _stacked(values):
    return torch.stack(values) if isinstance(values, list) else values


def _column(packs, index: int, parts: int):
    """Column ``index`` of ``parts`` of every step's pack."""
    if isinstance(packs, list):
        return [p.chunk(parts, 1)[index] for p in packs]
    return packs.chunk(parts, 2)[index]


def _backward_weight(w_hh, unroll: bool):
    """What a backward step multiplies by for ``g @ w_hh``: in a loop
    ``w_hh^T``, made once before it, for ``_times``; unrolled ``w_hh``."""
    return w_hh if unroll else w_hh.t().contiguous()


def _times(g, w, unroll: bool):
    """``g @ w_hh`` from ``_backward_weight``'s ``w``: in a loop as
    ``g @ (w_hh^T)^T``, whose right operand IREE reads by rows, twice as fast
    there as by columns (``passes/data_tiling`` keeps the transposes from
    folding back)."""
    return g @ w if unroll else F.linear(g, w)


# ---------------------------------------------------------------------- LSTM
def _lstm_direction(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr, reverse, unroll):
    """One direction of one layer: ``(hs, h, c, packs)``, time order; a pack
    is one step's ``[i, f, g, o, c]`` (gate activations, cell state),
    ``packs`` them all ``[T, B, 5 * hidden]`` (a list of steps if ``unroll``)."""
    steps, batch = x.shape[:2]
    xw = F.linear(x, w_ih, b_ih)  # every step's input projection: one matmul
    given = (b_hh is not None, w_hr is not None)

    def step(carries, rows, consts):
        (h, c), (xw,), (w_hh, *opt) = carries, rows, consts
        b_hh, w_hr = _unpack(opt, *given)
        i, f, g, o = (F.linear(h, w_hh, b_hh) + xw).chunk(4, 1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        if w_hr is not None:
            h = F.linear(h, w_hr)
        return (h, c), (h, torch.cat([i, f, g, o, c], 1))

    (h, c), (hs, packs) = scan(
        step, steps, (h, c), (xw,), (w_hh, *[w for w in (b_hh, w_hr) if w is not None]),
        ((batch, h.shape[-1]), (batch, 5 * c.shape[-1])), reverse, unroll)
    return _stacked(hs), h, c, packs


def _unpack(opt, *given):
    """The optional tensors ``opt`` (those present, in order) back in their
    places, None where ``given`` says absent."""
    it = iter(opt)
    return [next(it) if g else None for g in given]


def lstm(input, hx, cx, params, has_biases, num_layers, bidirectional, batch_first,
         unroll=False, workspace=0):
    """``[output, hy, cy, layer outputs, *packs, *workspaces]``; see the module
    docstring. The workspaces (``workspace`` > 0) are zeros here: only the
    host-call lowering (``host_calls/passes/rnn.py``) fills and reads them."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, hx.shape[-1] != cx.shape[-1])
    dirs = _directions(bidirectional)
    hy, cy, layers, packs = [], [], [], []
    for layer in range(num_layers):
        outs = []
        for d, reverse in enumerate(dirs):
            k = layer * len(dirs) + d
            hs, h, c, p = _lstm_direction(x, hx[k], cx[k], *groups[k], reverse, unroll)
            outs.append(hs)
            hy.append(h), cy.append(c)
            packs += p if unroll else [p]
        x = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
        layers.append(x)
    spare = [hx.new_zeros(workspace) for _ in range(len(hy))] if workspace else []
    return [_to_time_major(x, batch_first), torch.stack(hy), torch.stack(cy), torch.stack(layers),
            *packs, *spare]


def _lstm_direction_backward(dout, dh, dc, x, h0, c0, w_ih, w_hh, w_hr, hs, packs, reverse):
    """Gradients of one direction of one layer: ``(dx, dh0, dc0, dw_ih, dw_hh,
    dbias, dw_hr)``; ``dout`` (of ``hs``) may be None; ``packs`` a list of
    steps: unrolled."""
    steps, batch = x.shape[:2]
    unroll = isinstance(packs, list)
    dout = hs.new_zeros(hs.shape) if dout is None else dout
    c_prev = _previous(_column(packs, 4, 5), c0, reverse)
    proj = w_hr is not None
    hidden = c0.shape[-1]

    def step(carries, rows, consts):
        (dh, dc), (dout, pack, c_prev), (w_back, *w_hr) = carries, rows, consts
        dh = dh + dout
        i, f, g, o, c = pack.chunk(5, 1)
        tc = c.tanh()
        # with a projection: each step's dh and o * tanh(c), for w_hr's gradient
        extra = (dh, o * tc) if proj else ()
        if proj:
            dh = dh @ w_hr[0]  # through the projection h = w_hr (o * tanh(c))
        dc = dc + dh * o * (1 - tc * tc)
        d = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                       dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1)
        return (_times(d, w_back, unroll), dc * f), (d, *extra)

    shapes = ((batch, 4 * hidden),) + (((batch, hs.shape[-1]), (batch, hidden)) if proj else ())
    (dh, dc), ys = scan(step, steps, (dh, dc), (dout, packs, c_prev),
                        (_backward_weight(w_hh, unroll), *([w_hr] if proj else [])), shapes,
                        not reverse, unroll)
    d = _stacked(ys[0])
    dw_hh = _flat(d).t() @ _flat(_previous(hs, h0, reverse))
    dw_hr = _flat(_stacked(ys[1])).t() @ _flat(_stacked(ys[2])) if proj else None
    return d @ w_ih, dh, dc, _flat(d).t() @ _flat(x), dw_hh, d.sum((0, 1)), dw_hr


def _backward_through_layers(grad_output, x, saved, num_layers, dirs, batch_first, unroll,
                             direction):
    """Back-propagation through the layers, last to first, each layer's input
    gradient feeding the layer below. ``direction(k, d_out, inputs, hs,
    packs, reverse)`` is the backward of direction ``k`` (layer * dirs + d)
    and returns ``(d inputs, *its other gradients)``; its ``packs`` are a
    list of steps when the forward was unrolled. Returns ``(d input, [its
    other gradients for each k])``."""
    layers, packs, steps = saved[0], saved[1:], x.shape[0]
    if unroll:
        packs = [list(packs[k * steps:(k + 1) * steps]) for k in range(num_layers * dirs)]
    dout = None if grad_output is None else _split(_to_time_major(grad_output, batch_first),
                                                   dirs)
    per_direction = [None] * (num_layers * dirs)
    for layer in range(num_layers - 1, -1, -1):
        dx = None
        inputs = layers[layer - 1] if layer else x
        hs = _split(layers[layer], dirs)
        for d in range(dirs):
            k = layer * dirs + d
            got = direction(k, None if dout is None else dout[d], inputs, hs[d],
                            packs[k], d == 1)
            dx = got[0] if dx is None else dx + got[0]
            per_direction[k] = got[1:]
        dout = _split(dx, dirs)
    return _to_time_major(dx, batch_first), per_direction


def lstm_backward(grad_output, grad_hy, grad_cy, input, hx, cx, params, saved, has_biases,
                  num_layers, bidirectional, batch_first, unroll=False, workspace=0):
    """``[d input, d hx, d cx, *d params]``; None gradients are zeros."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, hx.shape[-1] != cx.shape[-1])
    grad_hy = torch.zeros_like(hx) if grad_hy is None else grad_hy
    grad_cy = torch.zeros_like(cx) if grad_cy is None else grad_cy

    def direction(k, dout, inputs, hs, packs, reverse):
        w_ih, w_hh, _, _, w_hr = groups[k]
        return _lstm_direction_backward(dout, grad_hy[k], grad_cy[k], inputs, hx[k], cx[k],
                                        w_ih, w_hh, w_hr, hs, packs, reverse)

    dx, per_direction = _backward_through_layers(
        grad_output, x, saved, num_layers, len(_directions(bidirectional)), batch_first, unroll,
        direction)
    dparams = []
    for k, (_, _, dw_ih, dw_hh, db, dw_hr) in enumerate(per_direction):
        dparams += ([dw_ih, dw_hh] + ([db, db.clone()] if has_biases else [])
                    + ([dw_hr] if groups[k][4] is not None else []))
    return [dx, torch.stack([g[0] for g in per_direction]),
            torch.stack([g[1] for g in per_direction]), *dparams]


# ------------------------------------------- the LSTM as host kernel calls
def _host_biases(b_ih, b_hh, w_ih):
    if b_ih is None:  # (no biases: zeros, whose gradients are dropped)
        zero = w_ih.new_zeros(w_ih.shape[0])
        return zero, zero
    return b_ih, b_hh


def host_lstm(input, hx, cx, params, has_biases, num_layers, bidirectional, batch_first,
              unroll=False, workspace=0):
    """``lazy_mlir::lstm`` as one oneDNN kernel call per layer and direction
    (``host_calls/ops/rnn.py``); its packs are NaN, its workspaces oneDNN's.
    ``NotImplemented`` for a node without a workspace (it keeps the loops)."""
    if unroll or not workspace:
        return NotImplemented
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, False)
    dirs = _directions(bidirectional)
    steps, batch, hidden = x.shape[0], x.shape[1], cx.shape[-1]
    hy, cy, layers, packs, saved = [], [], [], [], []
    for layer in range(num_layers):
        outs = []
        for d, reverse in enumerate(dirs):
            k = layer * len(dirs) + d
            w_ih, w_hh, b_ih, b_hh, _ = groups[k]
            y, h, c, ws = ops.host_lstm_layer(x, hx[k], cx[k], w_ih, w_hh,
                                              *_host_biases(b_ih, b_hh, w_ih), workspace,
                                              reverse)
            outs.append(y), hy.append(h), cy.append(c), saved.append(ws)
            packs.append(x.new_full((steps, batch, 5 * hidden), float("nan")))
        x = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
        layers.append(x)
    return [_to_time_major(x, batch_first), torch.stack(hy), torch.stack(cy),
            torch.stack(layers), *packs, *saved]


def host_lstm_backward(grad_output, grad_hy, grad_cy, input, hx, cx, params, saved,
                       has_biases, num_layers, bidirectional, batch_first, unroll=False,
                       workspace=0):
    """``lazy_mlir::lstm_backward`` as one kernel call per layer and direction
    (``NotImplemented`` without a workspace)."""
    if unroll or not workspace:
        return NotImplemented
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, False)
    dirs = len(_directions(bidirectional))
    *saved, hy, cy = saved  # (``lazy/rnn.py`` saves the final states after the workspaces)
    works = saved[len(saved) - num_layers * dirs:]
    grad_hy = torch.zeros_like(hx) if grad_hy is None else grad_hy
    grad_cy = torch.zeros_like(cx) if grad_cy is None else grad_cy

    def direction(k, dout, inputs, hs, pack, reverse):
        w_ih, w_hh, b_ih, b_hh, _ = groups[k]
        dout = hs.new_zeros(hs.shape) if dout is None else dout
        got = ops.host_lstm_layer_backward(
            inputs, hx[k], cx[k], w_ih, w_hh, *_host_biases(b_ih, b_hh, w_ih), hs, hy[k],
            cy[k], works[k], pack[:1, :1, :1], dout, grad_hy[k], grad_cy[k], reverse)
        return (*got, None)

    dx, per_direction = _backward_through_layers(
        grad_output, x, saved[:len(saved) - num_layers * dirs], num_layers, dirs, batch_first,
        False, direction)
    dparams = []
    for _, _, dw_ih, dw_hh, db, _ in per_direction:
        dparams += [dw_ih, dw_hh] + ([db, db.clone()] if has_biases else [])
    return [dx, torch.stack([g[0] for g in per_direction]),
            torch.stack([g[1] for g in per_direction]), *dparams]


# ----------------------------------------------------------------------- GRU
def _gru_direction(x, h, w_ih, w_hh, b_ih, b_hh, reverse, unroll):
    """One direction of one layer: ``(hs, h, packs)``; a pack is one step's
    ``[r, z, n, w_hn h + b_hn, h]`` with ``h`` the state the step starts
    from, ``packs`` them all ``[T, B, 5 * hidden]`` (a list of steps if
    ``unroll``)."""
    steps, batch = x.shape[:2]
    xw = F.linear(x, w_ih, b_ih)

    def step(carries, rows, consts):
        (h,), (xw,), (w_hh, *b_hh) = carries, rows, consts
        xr, xz, xn = xw.chunk(3, 1)
        hr, hz, hn = F.linear(h, w_hh, b_hh[0] if b_hh else None).chunk(3, 1)
        r = (hr + xr).sigmoid()
        z = (hz + xz).sigmoid()
        n = (xn + hn * r).tanh()
        pack = torch.cat([r, z, n, hn, h], 1)
        h = (h - n) * z + n
        return (h,), (h, pack)

    hidden = h.shape[-1]
    (h,), (hs, packs) = scan(step, steps, (h,), (xw,),
                             (w_hh, *([b_hh] if b_hh is not None else [])),
                             ((batch, hidden), (batch, 5 * hidden)), reverse, unroll)
    return _stacked(hs), h, packs


def gru(input, hx, params, has_biases, num_layers, bidirectional, batch_first, unroll=False):
    """``[output, hy, layer outputs, *packs]``; see the module docstring."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, False)
    dirs = _directions(bidirectional)
    hy, layers, packs = [], [], []
    for layer in range(num_layers):
        outs = []
        for d, reverse in enumerate(dirs):
            k = layer * len(dirs) + d
            w_ih, w_hh, b_ih, b_hh, _ = groups[k]
            hs, h, p = _gru_direction(x, hx[k], w_ih, w_hh, b_ih, b_hh, reverse, unroll)
            outs.append(hs)
            hy.append(h)
            packs += p if unroll else [p]
        x = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
        layers.append(x)
    return [_to_time_major(x, batch_first), torch.stack(hy), torch.stack(layers), *packs]


def _gru_direction_backward(dout, dh, x, h0, w_ih, w_hh, hs, packs, reverse):
    """Gradients of one direction of one layer: ``(dx, dh0, dw_ih, dw_hh,
    db_ih, db_hh)``; ``dout`` may be None; ``packs`` a list of steps:
    unrolled."""
    steps, batch = x.shape[:2]
    unroll = isinstance(packs, list)
    dout = hs.new_zeros(hs.shape) if dout is None else dout

    def step(carries, rows, consts):
        (dh,), (dout, pack), (w_back,) = carries, rows, consts
        dh = dh + dout
        r, z, n, hn, h_prev = pack.chunk(5, 1)
        dn = dh * (1 - z) * (1 - n * n)
        dr = dn * hn * r * (1 - r)
        dz = dh * (h_prev - n) * z * (1 - z)
        dh_pre = torch.cat([dr, dz, dn * r], 1)
        return (dh * z + _times(dh_pre, w_back, unroll),), (torch.cat([dr, dz, dn], 1), dh_pre)

    gates = (batch, 3 * dh.shape[-1])
    (dh,), (dx_pre, dh_pre) = scan(step, steps, (dh,), (dout, packs),
                                   (_backward_weight(w_hh, unroll),), (gates, gates),
                                   not reverse, unroll)
    dx_pre, dh_pre = _stacked(dx_pre), _stacked(dh_pre)
    h_prev = _previous(hs, h0, reverse)
    return (dx_pre @ w_ih, dh, _flat(dx_pre).t() @ _flat(x), _flat(dh_pre).t() @ _flat(h_prev),
            dx_pre.sum((0, 1)), dh_pre.sum((0, 1)))


def gru_backward(grad_output, grad_hy, input, hx, params, saved, has_biases, num_layers,
                 bidirectional, batch_first, unroll=False):
    """``[d input, d hx, *d params]``; None gradients are zeros."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, False)
    grad_hy = torch.zeros_like(hx) if grad_hy is None else grad_hy

    def direction(k, dout, inputs, hs, packs, reverse):
        w_ih, w_hh = groups[k][:2]
        return _gru_direction_backward(dout, grad_hy[k], inputs, hx[k], w_ih, w_hh, hs, packs,
                                       reverse)

    dx, per_direction = _backward_through_layers(
        grad_output, x, saved, num_layers, len(_directions(bidirectional)), batch_first, unroll,
        direction)
    dparams = []
    for _, *dw in per_direction:
        dparams += dw[:2] + (dw[2:] if has_biases else [])
    return [dx, torch.stack([g[0] for g in per_direction]), *dparams]


# ------------------------------------------------- kernels and decompositions
def _sequence(input, size, batch_first):
    """A new ``[T, B, size]`` tensor, batch-first as a transposed view of a
    time-major one, as eager's output is."""
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    out = input.new_empty((steps, batch, size))
    return out.transpose(0, 1) if batch_first else out


def _saved(input, h, layers, width, packed, batch_first, unroll):
    """The shapes of what the backward reads: each layer's output
    ``[layers, T, B, width]`` (time-major), then one ``[T, B, packed]`` pack
    per direction (time-major), or, unrolled, one ``[B, packed]`` pack per
    direction and step."""
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    if unroll:
        packs = [h.new_empty((batch, packed)) for _ in range(h.shape[0] * steps)]
    else:
        packs = [h.new_empty((steps, batch, packed)) for _ in range(h.shape[0])]
    return [h.new_empty((layers, steps, batch, width)), *packs]


def _lstm_shapes(input, hx, cx, params, has_biases, num_layers, bidirectional, batch_first,
                 unroll=False, workspace=0):
    hidden, width = cx.shape[-1], hx.shape[-1] * (1 + bidirectional)
    spare = [hx.new_empty((workspace,)) for _ in range(hx.shape[0])] if workspace else []
    return [_sequence(input, width, batch_first), hx.new_empty(hx.shape), cx.new_empty(cx.shape),
            *_saved(input, hx, num_layers, width, 5 * hidden, batch_first, unroll), *spare]


def _lstm_backward_shapes(grad_output, grad_hy, grad_cy, input, hx, cx, params, saved,
                          has_biases, num_layers, bidirectional, batch_first, unroll=False,
                          workspace=0):
    return [_sequence(input, input.shape[-1], batch_first), hx.new_empty(hx.shape),
            cx.new_empty(cx.shape), *[p.new_empty(p.shape) for p in params]]


def _gru_shapes(input, hx, params, has_biases, num_layers, bidirectional, batch_first,
                unroll=False):
    hidden = hx.shape[-1]
    width = hidden * (1 + bidirectional)
    return [_sequence(input, width, batch_first), hx.new_empty(hx.shape),
            *_saved(input, hx, num_layers, width, 5 * hidden, batch_first, unroll)]


def _gru_backward_shapes(grad_output, grad_hy, input, hx, params, saved, has_biases,
                         num_layers, bidirectional, batch_first, unroll=False):
    return [_sequence(input, input.shape[-1], batch_first), hx.new_empty(hx.shape),
            *[p.new_empty(p.shape) for p in params]]


def _cpu_kernel(loops, host):
    """The node's CPU kernel: where it has a workspace and host calls are on,
    ``host`` (as the compiled graph runs it: a graph run eagerly while its
    module compiles saves what the compiled one would); else ``loops``."""
    def kernel(*args, **kwargs):
        out = host(*args, **kwargs) if rnn_host.enabled() else NotImplemented
        return loops(*args, **kwargs) if out is NotImplemented else out
    return kernel


for _name, _fn, _shapes in (("lstm", lstm, _lstm_shapes),
                            ("lstm_backward", lstm_backward, _lstm_backward_shapes),
                            ("gru", gru, _gru_shapes),
                            ("gru_backward", gru_backward, _gru_backward_shapes)):
    _host = {"lstm": host_lstm, "lstm_backward": host_lstm_backward}.get(_name)
    _LIB.impl(_name, _fn if _host is None else _cpu_kernel(_fn, _host), "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(as_traced_loops(_fn))
