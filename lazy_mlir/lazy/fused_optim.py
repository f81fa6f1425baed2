"""torch.optim's fused updates on lazy tensors: one graph node per call.

``Adam``/``AdamW``/``SGD`` with ``fused=True`` make one aten call per
parameter group and step (``_fused_adam_``, ``_fused_adamw_``,
``_fused_sgd_``, each with a float-lr and a ``tensor_lr`` overload). It
returns nothing and writes its list arguments in place. Capture records it
as ``lazy_mlir::fused_adam`` / ``fused_sgd`` (``ops/optim.py``: the math,
and how it becomes aten ops before import), whose outputs are the new
values of every tensor the kernel writes, then writes each one into its
tensor (``capture.assign``: a view or alias of a parameter sees the write).
The whole update is then one node where the foreach path records a dozen
(and PyTorch's own Python runs a dozen foreach calls).

- A float ``lr`` becomes a 0-dim graph input (``capture._make_scalar``), not
  a constant: an LR schedule changes an input, never the graph. A tensor
  ``lr`` (lazy or host) is an input as it is. While ``log_lifted`` is on
  (``compile_train_step`` records a step), each lifted hyperparameter is a
  fresh input, logged with the param-group keys it comes from, so a replay
  binds the group's new value to that input alone.
- Step counts on the lazy device are inputs of the node; host step counts
  (``capturable=False`` with fused chosen by ``prefer_fused``) are stacked on
  the host into ONE [n] input.
- Refused, and run eagerly on host copies (counted as an ``aten::`` fallback,
  as before this module): tensors that are not all lazy, more than one dtype
  among the written lists, two written tensors sharing storage, or
  decompositions switched off / the op denied by a failed compile.

``prefer_fused()`` lets torch.optim choose the fused path for lazy
parameters: ``lazy`` joins ``_get_fused_kernels_supported_devices()`` (so
``fused=True`` is accepted) and, when the user passes neither ``foreach`` nor
``fused``, Adam, AdamW and SGD take the fused path where PyTorch would take
its foreach path (see ``prefer_fused``).
"""
from __future__ import annotations

import operator
from typing import Callable, NamedTuple

import torch

from .. import metrics
from ..config import current_config
from ..graph.ir import Value
from ..ops import optim as _optim_ops
from ..ops import support as _support
from .capture import _make_scalar, assign, assign_each, data_value, schema_facts, value_of
from . import list_replay
from .foreach import add_lazy_device, run_eagerly
from .tensor import LazyTensor, wrap_value

aten = torch.ops.aten
ops = _optim_ops.ops

# ``dispatch.record`` (installed by dispatch.py, which imports this module).
_record = None

ADAM = (aten._fused_adam_.default, aten._fused_adam_.tensor_lr)
ADAMW = (aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr)
SGD = (aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
OPS = frozenset((*ADAM, *ADAMW, *SGD))


def _bind(func, args, kwargs) -> dict:
    names, defaults, _ = schema_facts(func)
    bound = dict(defaults)
    bound.update(zip(names, args))
    bound.update(kwargs)
    return bound


def _refusal(written: list, read: list, steps) -> str | None:
    """Why this call cannot be one node, or None. ``written``: every tensor
    the kernel writes; ``read``: the other list tensors (grads not written).
    (Each check a C-level pass over the lists: a step of a model with 36
    parameters checks ~150 tensors; 59 -> ~15 us on ViT tiny.)"""
    if not current_config().decompositions:
        return "decompositions off"
    if not written:
        return None
    types = set(map(type, written))
    if types != _LAZY:
        return "not all lazy"
    if len(set(map(_dtype_of, written))) != 1:  # (a lazy tensor's spec, kept in step with it)
        return "more than one dtype"
    if read and set(map(type, read)) != _LAZY:
        return "not all lazy"
    if len(set(map(id, map(_storage_of, written)))) != len(written):
        return "written tensors share storage"
    if steps:
        kinds = set(map(type, steps))
        if LazyTensor in kinds and len(kinds) > 1:
            return "step counts on two devices"
    return None


_LAZY = {LazyTensor}
_dtype_of = operator.attrgetter("spec.dtype")
_storage_of = operator.attrgetter("_storage")


class Lifted(NamedTuple):
    """A hyperparameter lifted while ``log_lifted`` is on: the graph input
    ``data`` holds ``torch.tensor(of(*group[k] for k in keys), dtype)``
    for the param group holding ``param``."""
    param: torch.Tensor
    keys: tuple[str, ...]
    of: Callable
    dtype: torch.dtype
    data: object


_lift_logs: list[list] = []


def log_lifted() -> list:
    """A list that collects a ``Lifted`` for every hyperparameter lifted
    until ``stop_lift_log`` (``compile_train_step`` binds each anew per
    replay: a learning-rate schedule then replays the same graph)."""
    log: list = []
    _lift_logs.append(log)
    return log


def stop_lift_log(log: list) -> None:
    _lift_logs.remove(log)


def _lifted(param, keys: tuple, of: Callable, values: tuple, dtype) -> LazyTensor:
    """``of(*values)`` as a tensor input: ``_make_scalar``'s shared one, or,
    while logged, a fresh one of its own (a shared one may also feed the
    model, which a new learning rate must not change)."""
    x = of(*values)
    if not _lift_logs:
        return _make_scalar(x, dtype)
    t = wrap_value(data_value(torch.tensor(x, dtype=dtype)))
    for log in _lift_logs:
        log.append(Lifted(param, keys, of, dtype, value_of(t).data))
    return t


def _lr(lr, dtype, param):
    """The learning rate as a 0-dim tensor the node takes as an input."""
    if isinstance(lr, LazyTensor):
        return lr
    if isinstance(lr, torch.Tensor):
        return wrap_value(data_value(lr.detach().reshape(()).to(dtype).clone()))
    return _lifted(param, ("lr",), float, (lr,), dtype)


def _steps(steps) -> list:
    """Lazy step counts as they are; host ones stacked into one [n] input."""
    if not steps or type(steps[0]) is LazyTensor:
        return list(steps)
    host = torch.stack([s.detach().reshape(()) for s in steps]).to(torch.float32)
    return [wrap_value(data_value(host))]


def _optional(t):
    """``grad_scale`` / ``found_inf``: lazy as they are, host ones uploaded."""
    if t is None or isinstance(t, LazyTensor):
        return t
    return wrap_value(data_value(t.detach().clone()))


def _write(targets: list, outs) -> None:
    """Write each output into its tensor (the node's outputs, in order)."""
    if type(outs) is list and all(type(o) is Value for o in outs):
        assign_each(targets, outs)  # recorded from its plan: bare Values
        return
    for t, o in zip(targets, outs):
        assign(t, o if type(o) is Value else value_of(o))


def _handled_without_node(func, args, kwargs, node_op, lists) -> bool:
    """True when the call needs no node: no parameters (nothing to do), or
    refused (``_refusal`` of ``lists`` = written, read, step counts, or
    ``node_op`` denied), then run eagerly on host copies and counted."""
    if not lists[0]:
        return True
    why = _refusal(*lists)
    if why is None and not _support.op_is_supported(node_op):
        why = "denied"
    if why is None:
        return False
    run_eagerly(func, args, kwargs, why)
    return True


def _fused_adam(func, args, kwargs):
    b = _bind(func, args, kwargs)
    params, grads, exp_avgs, exp_avg_sqs = b["self"], b["grads"], b["exp_avgs"], b["exp_avg_sqs"]
    amsgrad, grad_scale = b["amsgrad"], b["grad_scale"]
    max_sqs = list(b["max_exp_avg_sqs"]) if amsgrad else []
    written = [*params, *exp_avgs, *exp_avg_sqs, *max_sqs]
    written += list(grads) if grad_scale is not None else []
    read = list(grads) if grad_scale is None else []
    if _replayed(func, b, written, max_sqs):
        return None
    if _handled_without_node(func, args, kwargs, ops.fused_adam.default,
                             (written, read, b["state_steps"])):
        return None
    dtype = params[0].dtype
    steps, lr = _steps(b["state_steps"]), _lr(b["lr"], dtype, params[0])
    betas, consts = _adam_betas(b, dtype), _adam_constants(func, b)
    before = (list_replay.values([*params, *grads, *exp_avgs, *exp_avg_sqs, *max_sqs, *steps, lr,
                                  betas]) if _replayable(b) else None)
    outs = _record(ops.fused_adam.default, (list(params), list(grads), list(exp_avgs),
                                            list(exp_avg_sqs), max_sqs, steps, lr, betas, *consts,
                                            _optional(grad_scale), _optional(b["found_inf"])),
                   {}, bare=True)
    if before is not None:
        list_replay.keep(func, params[0], _ADAM_TREE, [*consts, None, None], before, outs,
                         "lazy::fused_adam")
    _write(written, outs)
    return None


def _adam_betas(b, dtype) -> LazyTensor:
    """The betas as the node's tensor argument (``ops.optim.adam_betas``):
    lifted, so a momentum schedule changes an input, not the graph."""
    return _lifted(b["self"][0], ("betas",), _betas_terms, ((b["beta1"], b["beta2"]),),
                   _optim_ops.hyper_dtype(dtype))


def _betas_terms(betas) -> tuple[float, ...]:
    return _optim_ops.adam_betas(float(betas[0]), float(betas[1]))


def _momentum_terms(momentum, dampening) -> tuple[float, float]:
    return _optim_ops.sgd_momentum(float(momentum), float(dampening))


def _adam_constants(func, b) -> list:
    """The node's constant arguments (after its tensors, before grad_scale
    and found_inf)."""
    return [float(b["weight_decay"]), float(b["eps"]),
            bool(b["amsgrad"]), bool(b["maximize"]), func in ADAMW]


_ADAM_TREE = "fused_adam"  # (one call shape: tensors in the node's order, then constants)


def _replayable(b) -> bool:
    """Whether this call may be replayed next time: lazy step counts (they
    are node inputs as they are) and a float or lazy learning rate, no
    gradient scaling."""
    steps = b["state_steps"]
    return (b["grad_scale"] is None and b["found_inf"] is None and bool(steps)
            and type(steps[0]) is LazyTensor and type(b["lr"]) in (float, int, LazyTensor))


def _replayed(func, b, written: list, max_sqs: list) -> bool:
    """Record this call from its last record (``list_replay``) when the same
    facts hold: True when done."""
    params = b["self"]
    if not params or not _replayable(b):
        return False
    r = list_replay.find(func, params[0])
    if r is None:
        return False
    lr = b["lr"]
    if type(lr) is not LazyTensor:
        if type(params[0]) is not LazyTensor:
            return False
        lr = _lr(lr, params[0].dtype, params[0])
    vals = list_replay.values([*params, *b["grads"], *b["exp_avgs"], *b["exp_avg_sqs"],
                               *max_sqs, *b["state_steps"], lr,
                               _adam_betas(b, params[0].dtype)])
    if (vals is None or len(set(map(list_replay.dtype_of, written))) != 1
            or len(set(map(id, map(list_replay.storage_of, written)))) != len(written)):
        return False
    outs = list_replay.replay(r, _ADAM_TREE, vals, [*_adam_constants(func, b), None, None])
    if outs is None:
        return False
    assign_each(written, outs)
    return True


def _fused_sgd(func, args, kwargs):
    b = _bind(func, args, kwargs)
    params, grads, grad_scale = b["self"], b["grads"], b["grad_scale"]
    momentum, dtype = float(b["momentum"]), params[0].dtype
    buffers = list(b["momentum_buffer_list"]) if momentum != 0.0 else []
    written = [*params, *buffers, *(grads if grad_scale is not None else ())]
    read = list(grads) if grad_scale is None else []
    if _handled_without_node(func, args, kwargs, ops.fused_sgd.default, (written, read, ())):
        return None
    terms = _lifted(params[0], ("momentum", "dampening"), _momentum_terms,
                    (momentum, b["dampening"]), _optim_ops.hyper_dtype(dtype))
    node_args = (list(params), list(grads), buffers, _lr(b["lr"], dtype, params[0]),
                 float(b["weight_decay"]), terms,
                 momentum != 0.0, bool(b["nesterov"]), bool(b["maximize"]), bool(b["is_first_step"]),
                 _optional(grad_scale), _optional(b["found_inf"]))
    _write(written, _record(ops.fused_sgd.default, node_args, {}, bare=True))
    return None


def _skipping_empty(handler):
    """``handler`` called without the parameters that have no elements (a
    zero-sized layer: MobileBERT's tiny config has one), whose update is
    nothing (torch.optim's Python has already advanced their step counts).
    Capture refuses an op that reads an empty tensor and makes a non-empty
    result, so one empty parameter sent the whole update to run eagerly on
    host copies, reading back every parameter each step."""
    def call(func, args, kwargs):
        b = _bind(func, args, kwargs)
        params = b["self"]
        if all(map(_numel, params)):
            return handler(func, args, kwargs)
        keep = [i for i, p in enumerate(params) if p.numel()]
        n = len(params)
        kept = {k: [v[i] for i in keep] if isinstance(v, (list, tuple)) and len(v) == n else v
                for k, v in b.items()}
        return handler(func, (), kept) if keep else None
    return call


_numel = operator.methodcaller("numel")
SPECIAL = {**{f: _skipping_empty(_fused_adam) for f in (*ADAM, *ADAMW)},
           **{f: _skipping_empty(_fused_sgd) for f in SGD}}


def prefer_fused() -> bool:
    """Let torch.optim take its fused path for lazy parameters; returns
    whether it applied. ``lazy`` joins ``_get_fused_kernels_supported_devices``
    in ``torch.optim.optimizer`` (``fused=True`` is accepted: PyTorch checks
    the device there), and ``torch.optim.adam.adam`` / ``torch.optim.sgd.sgd``
    (the functions ``Adam.step``, ``AdamW.step`` and ``SGD.step`` call) choose
    ``fused=True`` when the user passed neither ``foreach`` nor ``fused`` and
    every parameter is a floating-point lazy tensor: where PyTorch would
    choose foreach on CUDA. ``foreach=True`` or ``fused=False`` are kept."""
    import torch.optim.adam as adam_mod
    import torch.optim.sgd as sgd_mod
    if (not callable(getattr(adam_mod, "adam", None))
            or not add_lazy_device("_get_fused_kernels_supported_devices")):
        return False
    adam_mod.adam = _defaulting_to_fused(adam_mod.adam, lists=6)
    sgd_mod.sgd = _defaulting_to_fused(sgd_mod.sgd, lists=3)
    return True


def _defaulting_to_fused(fn, lists: int):
    """``fn`` (torch.optim's functional adam/sgd, whose first ``lists``
    arguments are the tensor lists) with ``fused=True`` as the default for
    lazy parameters. A call passing more arguments by position (``foreach``
    among them) is left alone."""
    fn = getattr(fn, "_lazy_mlir_original", fn)  # applied once

    def update(params, *args, **kwargs):
        if (len(args) < lists and kwargs.get("foreach") is None
                and kwargs.get("fused") is None and not kwargs.get("differentiable")
                and not kwargs.get("has_sparse_grad") and params
                and all(type(p) is LazyTensor and p.is_floating_point() for p in params)):
            metrics.counter_inc("fused_by_default::" + fn.__name__)
            kwargs["fused"] = True
        return fn(params, *args, **kwargs)

    update._lazy_mlir_original = fn
    update.__name__, update.__doc__ = fn.__name__, fn.__doc__
    return update
