"""Recurrent layers (``nn.LSTM``, ``nn.GRU``) as one node each way.

``aten::lstm`` and ``aten::gru`` are CompositeImplicitAutograd: PyTorch
decomposes them into each time step's ops before ``__torch_dispatch__``
sees them, forward and backward (a 2-layer LSTM over 32 steps records
~3,200 ops per training step). The lazy device records them instead as the
ops defined here (``lazy/rnn.py`` routes them, under an autograd function):

- ``lazy_mlir::lstm`` / ``lazy_mlir::gru``: the whole forward (every layer and
  direction) as one list: the output and final states, then what the
  backward reads: each layer's output (time-major) and one "pack" per
  direction and step (the LSTM's gate activations and cell state, the GRU's
  gates and the state the step starts from);
- ``lazy_mlir::lstm_backward`` / ``lazy_mlir::gru_backward``: the gradients
  of the input, the initial states and every parameter (in ``params``
  order), as one list. The weight gradients are one matmul over all steps
  (``dgates^T @ inputs``), not a sum of one term per step.

Why a pack per step rather than one stacked tensor: each step's backward
reads its saved values at offset 0 of a tensor of its own, so IREE's
dispatches for the steps are identical and compiled once; slices of one
stacked tensor put a different constant offset into every step's dispatch
(107 distinct executables instead of 66 for a 2-layer, 8-step LSTM, the
compile 50% slower than PyTorch's per-step path).

Both become aten ops on the fx graph before torch-mlir imports it (IMPORT
scope, below): the forward is the recurrence unrolled over the steps as
PyTorch's own decomposition (``torch._decomp``'s ``lstm_impl``) writes it,
the backward is back-propagation through time written out. The same
functions are the ops' CPU kernels (a graph denied at run time still runs),
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

from .registry import IMPORT, register_decomposition

_CONFIG = "bool has_biases, int num_layers, bool bidirectional, bool batch_first"
_LIB = torch.library.Library("lazy_mlir", "FRAGMENT")  # (other modules may add ops)
_LIB.define(f"lstm(Tensor input, Tensor hx, Tensor cx, Tensor[] params, {_CONFIG}) -> Tensor[]")
_LIB.define("lstm_backward(Tensor? grad_output, Tensor? grad_hy, Tensor? grad_cy, Tensor input, "
            f"Tensor hx, Tensor cx, Tensor[] params, Tensor[] saved, {_CONFIG}) -> Tensor[]")
_LIB.define(f"gru(Tensor input, Tensor hx, Tensor[] params, {_CONFIG}) -> Tensor[]")
_LIB.define("gru_backward(Tensor? grad_output, Tensor? grad_hy, Tensor input, Tensor hx, "
            f"Tensor[] params, Tensor[] saved, {_CONFIG}) -> Tensor[]")

ops = torch.ops.lazy_mlir


def _groups(params, has_biases: bool, proj: bool) -> list[tuple]:
    """``(w_ih, w_hh, b_ih, b_hh, w_hr)`` per layer and direction (None where absent)."""
    size = 2 + 2 * has_biases + proj
    out = []
    for k in range(0, len(params), size):
        g = params[k:k + size]
        b_ih, b_hh = (g[2], g[3]) if has_biases else (None, None)
        out.append((g[0], g[1], b_ih, b_hh, g[-1] if proj else None))
    return out


def _steps(n: int, reverse: bool, backward: bool = False):
    """The time indices in the order a direction visits them."""
    return range(n) if reverse == backward else range(n - 1, -1, -1)


def _flat(a):
    return a.reshape(-1, a.shape[-1])


def _previous(seq, first, reverse: bool):
    """Each step's previous state: ``first`` then ``seq`` shifted by one."""
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


# ---------------------------------------------------------------------- LSTM
def _lstm_direction(x, h, c, w_ih, w_hh, b_ih, b_hh, w_hr, reverse):
    """One direction of one layer: ``(hs, h, c, packs)``, time order; a pack
    is one step's ``[i, f, g, o, c]`` (gate activations, cell state)."""
    steps = x.shape[0]
    xw = F.linear(x, w_ih, b_ih)
    hs, packs = [None] * steps, [None] * steps
    for t in _steps(steps, reverse):
        i, f, g, o = (F.linear(h, w_hh, b_hh) + xw[t]).chunk(4, 1)
        i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
        c = f * c + i * g
        h = o * c.tanh()
        if w_hr is not None:
            h = F.linear(h, w_hr)
        hs[t], packs[t] = h, torch.cat([i, f, g, o, c], 1)
    return torch.stack(hs), h, c, packs


def lstm(input, hx, cx, params, has_biases, num_layers, bidirectional, batch_first):
    """``[output, hy, cy, layer outputs, *packs]``; see the module docstring."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, hx.shape[-1] != cx.shape[-1])
    dirs = _directions(bidirectional)
    hy, cy, layers, packs = [], [], [], []
    for layer in range(num_layers):
        outs = []
        for d, reverse in enumerate(dirs):
            k = layer * len(dirs) + d
            hs, h, c, p = _lstm_direction(x, hx[k], cx[k], *groups[k], reverse)
            outs.append(hs)
            hy.append(h), cy.append(c)
            packs += p
        x = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
        layers.append(x)
    return [_to_time_major(x, batch_first), torch.stack(hy), torch.stack(cy), torch.stack(layers),
            *packs]


def _lstm_direction_backward(dout, dh, dc, x, h0, c0, w_ih, w_hh, w_hr, hs, packs, reverse):
    """Gradients of one direction of one layer: ``(dx, dh0, dc0, dw_ih, dw_hh,
    dbias, dw_hr)``; ``dout`` (of ``hs``) may be None."""
    steps = x.shape[0]
    dpre, dhs, rs = [None] * steps, [None] * steps, [None] * steps
    for t in _steps(steps, reverse, backward=True):
        if dout is not None:
            dh = dh + dout[t]
        i, f, g, o, c = packs[t].chunk(5, 1)
        prev = t + 1 if reverse else t - 1
        c_prev = packs[prev].chunk(5, 1)[4] if 0 <= prev < steps else c0
        tc = c.tanh()
        if w_hr is not None:
            dhs[t], rs[t] = dh, o * tc
            dh = dh @ w_hr  # through the projection h = w_hr (o * tanh(c))
        dc = dc + dh * o * (1 - tc * tc)
        dpre[t] = torch.cat([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                             dc * i * (1 - g * g), dh * tc * o * (1 - o)], 1)
        dc = dc * f
        dh = dpre[t] @ w_hh
    d = torch.stack(dpre)
    dw_hh = _flat(d).t() @ _flat(_previous(hs, h0, reverse))
    dw_hr = None
    if w_hr is not None:
        dw_hr = _flat(torch.stack(dhs)).t() @ _flat(torch.stack(rs))
    return d @ w_ih, dh, dc, _flat(d).t() @ _flat(x), dw_hh, d.sum((0, 1)), dw_hr


def _backward_through_layers(grad_output, x, saved, num_layers, dirs, batch_first, direction):
    """Back-propagation through the layers, last to first, each layer's input
    gradient feeding the layer below. ``direction(k, d_out, inputs, hs,
    packs, reverse)`` is the backward of direction ``k`` (layer * dirs + d)
    and returns ``(d inputs, *its other gradients)``. Returns ``(d input,
    [its other gradients for each k])``."""
    layers, packs, steps = saved[0], saved[1:], x.shape[0]
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
                            packs[k * steps:(k + 1) * steps], d == 1)
            dx = got[0] if dx is None else dx + got[0]
            per_direction[k] = got[1:]
        dout = _split(dx, dirs)
    return _to_time_major(dx, batch_first), per_direction


def lstm_backward(grad_output, grad_hy, grad_cy, input, hx, cx, params, saved, has_biases,
                  num_layers, bidirectional, batch_first):
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
        grad_output, x, saved, num_layers, len(_directions(bidirectional)), batch_first,
        direction)
    dparams = []
    for k, (_, _, dw_ih, dw_hh, db, dw_hr) in enumerate(per_direction):
        dparams += ([dw_ih, dw_hh] + ([db, db.clone()] if has_biases else [])
                    + ([dw_hr] if groups[k][4] is not None else []))
    return [dx, torch.stack([g[0] for g in per_direction]),
            torch.stack([g[1] for g in per_direction]), *dparams]


# ----------------------------------------------------------------------- GRU
def _gru_direction(x, h, w_ih, w_hh, b_ih, b_hh, reverse):
    """One direction of one layer: ``(hs, h, packs)``; a pack is one step's
    ``[r, z, n, w_hn h + b_hn, h]`` with ``h`` the state the step starts from."""
    steps = x.shape[0]
    xw = F.linear(x, w_ih, b_ih)
    hs, packs = [None] * steps, [None] * steps
    for t in _steps(steps, reverse):
        xr, xz, xn = xw[t].chunk(3, 1)
        hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, 1)
        r = (hr + xr).sigmoid()
        z = (hz + xz).sigmoid()
        n = (xn + hn * r).tanh()
        packs[t] = torch.cat([r, z, n, hn, h], 1)
        h = (h - n) * z + n
        hs[t] = h
    return torch.stack(hs), h, packs


def gru(input, hx, params, has_biases, num_layers, bidirectional, batch_first):
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
            hs, h, p = _gru_direction(x, hx[k], w_ih, w_hh, b_ih, b_hh, reverse)
            outs.append(hs)
            hy.append(h)
            packs += p
        x = torch.cat(outs, -1) if len(outs) > 1 else outs[0]
        layers.append(x)
    return [_to_time_major(x, batch_first), torch.stack(hy), torch.stack(layers), *packs]


def _gru_direction_backward(dout, dh, x, h0, w_ih, w_hh, hs, packs, reverse):
    """Gradients of one direction of one layer: ``(dx, dh0, dw_ih, dw_hh,
    db_ih, db_hh)``; ``dout`` may be None."""
    steps = x.shape[0]
    dxw, dhw = [None] * steps, [None] * steps
    for t in _steps(steps, reverse, backward=True):
        if dout is not None:
            dh = dh + dout[t]
        r, z, n, hn, h_prev = packs[t].chunk(5, 1)
        dn = dh * (1 - z) * (1 - n * n)
        dr = dn * hn * r * (1 - r)
        dz = dh * (h_prev - n) * z * (1 - z)
        dxw[t] = torch.cat([dr, dz, dn], 1)
        dhw[t] = torch.cat([dr, dz, dn * r], 1)
        dh = dh * z + dhw[t] @ w_hh
    dx_pre, dh_pre = torch.stack(dxw), torch.stack(dhw)
    h_prev = _previous(hs, h0, reverse)
    return (dx_pre @ w_ih, dh, _flat(dx_pre).t() @ _flat(x), _flat(dh_pre).t() @ _flat(h_prev),
            dx_pre.sum((0, 1)), dh_pre.sum((0, 1)))


def gru_backward(grad_output, grad_hy, input, hx, params, saved, has_biases, num_layers,
                 bidirectional, batch_first):
    """``[d input, d hx, *d params]``; None gradients are zeros."""
    x = _to_time_major(input, batch_first)
    groups = _groups(params, has_biases, False)
    grad_hy = torch.zeros_like(hx) if grad_hy is None else grad_hy

    def direction(k, dout, inputs, hs, packs, reverse):
        w_ih, w_hh = groups[k][:2]
        return _gru_direction_backward(dout, grad_hy[k], inputs, hx[k], w_ih, w_hh, hs, packs,
                                       reverse)

    dx, per_direction = _backward_through_layers(
        grad_output, x, saved, num_layers, len(_directions(bidirectional)), batch_first,
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


def _saved(input, h, layers, width, packed, batch_first):
    """The shapes of what the backward reads: each layer's output
    ``[layers, T, B, width]`` (time-major), then one ``[B, packed]`` pack per
    direction and step."""
    steps, batch = (input.shape[1], input.shape[0]) if batch_first else input.shape[:2]
    return [h.new_empty((layers, steps, batch, width)),
            *[h.new_empty((batch, packed)) for _ in range(h.shape[0] * steps)]]


def _lstm_shapes(input, hx, cx, params, has_biases, num_layers, bidirectional, batch_first):
    hidden, width = cx.shape[-1], hx.shape[-1] * (1 + bidirectional)
    return [_sequence(input, width, batch_first), hx.new_empty(hx.shape), cx.new_empty(cx.shape),
            *_saved(input, hx, num_layers, width, 5 * hidden, batch_first)]


def _lstm_backward_shapes(grad_output, grad_hy, grad_cy, input, hx, cx, params, *rest):
    batch_first = rest[-1]
    return [_sequence(input, input.shape[-1], batch_first), hx.new_empty(hx.shape),
            cx.new_empty(cx.shape), *[p.new_empty(p.shape) for p in params]]


def _gru_shapes(input, hx, params, has_biases, num_layers, bidirectional, batch_first):
    hidden = hx.shape[-1]
    width = hidden * (1 + bidirectional)
    return [_sequence(input, width, batch_first), hx.new_empty(hx.shape),
            *_saved(input, hx, num_layers, width, 5 * hidden, batch_first)]


def _gru_backward_shapes(grad_output, grad_hy, input, hx, params, *rest):
    batch_first = rest[-1]
    return [_sequence(input, input.shape[-1], batch_first), hx.new_empty(hx.shape),
            *[p.new_empty(p.shape) for p in params]]


for _name, _fn, _shapes in (("lstm", lstm, _lstm_shapes),
                            ("lstm_backward", lstm_backward, _lstm_backward_shapes),
                            ("gru", gru, _gru_shapes),
                            ("gru_backward", gru_backward, _gru_backward_shapes)):
    _LIB.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"lazy_mlir::{_name}", _shapes, lib=_LIB)
    register_decomposition(getattr(ops, _name).default, scope=IMPORT)(_fn)
