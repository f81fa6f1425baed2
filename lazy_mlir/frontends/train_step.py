"""``lm.compile_train_step``: a training step replayed as one compiled graph.

On the lazy device every step runs the model's Python and records each op
(about 30 µs an op, 12 of them PyTorch's own dispatch and autograd): at batch
1 that is most of the step. ``compile_train_step(model, loss_fn, optimizer)``
returns ``step``; ``step(*inputs, target)`` does what this does::

    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(*inputs), target)
    loss.backward()
    optimizer.step()
    return loss.detach()

(with ``max_grad_norm=``, ``clip_grad_norm_(model.parameters(), max_grad_norm)``
before ``optimizer.step()``; with ``return_outputs=True`` it returns
``(loss, outputs)``, the model's outputs detached: ``train_step_outputs``).

The batch may also come as keyword inputs, and the model may compute its own
loss (``loss_fn`` left out: ``compile_train_step(model, optimizer)``):

- ``step(*inputs, target)``: ``loss_fn(model(*inputs), target)``, as above;
- ``step(**batch)`` or ``step(batch_dict)`` with a ``loss_fn``:
  ``loss_fn(model(**rest), batch[target_key])``: the ``target_key`` entry
  (``"labels"``) is the target, the rest are the model's keyword inputs;
- without a ``loss_fn``, ``step(*inputs, **batch)`` or ``step(batch_dict)``:
  the loss is what ``model(*inputs, **batch)`` returns: a tensor, or
  ``output.loss`` (``transformers`` models given ``labels``), or
  ``output["loss"]``.

Inputs that are not tensors (``return_dict=True``) are passed as given and
are part of the guard below (a new value records again).

The first calls run exactly that on the lazy device, each as one graph whose
leading inputs are the state (parameters, buffers, optimizer state) and the
batch. Once two consecutive calls record the same graph with the same
constants, later calls skip the Python: they launch the compiled graph on the
current state and batch and bind its outputs (the new state, the gradients,
the loss) to the same tensor objects. ``model.parameters()``,
``optimizer.state`` and ``p.grad`` are then what the plain step leaves.

Guarantees:

- A replay happens only under the conditions of its recording: the same
  batch structure (positional count, keyword names, non-tensor values), shapes
  and dtypes (or other batch sizes, below), the same state tensor objects, the same
  hyperparameters and non-tensor optimizer state (a learning-rate scheduler's
  change records again, once; but the fused Adam, AdamW and SGD's learning
  rate, betas and momentum are inputs bound per replay: ``train_step_hyper``),
  the same ``train()``/``eval()`` modes (of the modules the model had when
  the step was made), grad
  mode, ``lm.autocast`` state (on or off, its dtype), target and pipeline
  config. Anything else runs the plain step.
- A step that reads a tensor on the host (``.item()``, ``if tensor:``), runs
  an op eagerly, or computes on the host a value that changes from step to
  step (two recordings disagree) is never replayed: it runs as the plain
  lazy step, counted in ``TrainStepPlain``, with the reason logged once
  (``TrainStepRefused``). Adam, AdamW, NAdam, ... with ``capturable=False``
  read their step count with ``.item()`` on their foreach and for-loop
  paths: they run plain; with ``capturable=True`` (allowed on the lazy
  device, ``capturable.py``) they are replayed, and so are Adam, AdamW and
  SGD on their fused path, the default on lazy parameters
  (``lazy/fused_optim.py``).
- The optimizer's CPU scalar state (step counts) moves to the lazy device
  when the step is recorded, as in ``export_train_step``; it moves back if
  the recording is refused.
- Python state outside the model, the optimizer and the batch is not seen:
  a global flag the forward reads, changed after the recording, is not
  replayed until ``step.reset()``.
- Random ops (dropout) draw a new seed from PyTorch's CPU generator for every
  replay, as the plain step does.
- Index checks are kept: the recording checks indices (class targets, ...)
  with in-graph flags, so an out-of-range one in a replayed batch raises at
  the next sync, as in the plain step.

- A batch of a new shape replays without recording where only dynamic
  sizes changed (``train_step_sizes``: once two recordings at two batch
  shapes agree but for their sizes, any other size their module with
  dynamic dimensions admits); ``dynamic=False`` records at every shape.

Counters: ``TrainStepRecorded``, ``TrainStepReplayed``, ``TrainStepPlain``,
``TrainStepRefused``, ``TrainStepNewSize``.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

import torch

from ..lazy import bounds, early_outputs, fused_optim, host_eval, random
from .. import metrics
from ..lazy.capture import assign, emit, value_of
from ..lazy.collectives import NAMES as COLLECTIVES
from ..compile_service.executable import LOADED
from . import train_step_hyper as hyperparams
from . import train_step_outputs as outputs
from . import train_step_sizes as sizes
from ..lazy.autocast import state as autocast_state
from ..graph.ir import DeviceData, Value
from ..lazy.sync import current_target, execute, launch, mark_step, run_entry
from ..lazy.tensor import LazyTensor, wrap_value
from ..config import current_config

log = logging.getLogger("lazy_mlir")
_HASHABLE = (int, float, bool, str, type(None), tuple, frozenset)


def compile_train_step(model, loss_fn=None, optimizer=None, *, target_key: str = "labels",
                       dynamic: bool = True, max_grad_norm: float | None = None,
                       return_outputs: bool = False) -> "CompiledTrainStep":
    """``step``: one training step, replayed as one compiled graph once it
    repeats (see the module docstring for the call forms).

    ``compile_train_step(model, loss_fn, optimizer)``, or
    ``compile_train_step(model, optimizer)`` for a model that returns its own
    loss. ``target_key``: with a keyword batch and a ``loss_fn``, the entry
    given to ``loss_fn`` as the target instead of to the model. ``dynamic``:
    a batch of a new shape may replay on a module with dynamic dimensions
    (``train_step_sizes``); False records at every batch shape.
    ``max_grad_norm``: ``torch.nn.utils.clip_grad_norm_(model.parameters(),
    max_grad_norm)`` between the backward and the optimizer's step, part of
    the replayed graph (it reads nothing on the host). ``return_outputs``:
    ``step(...)`` returns ``(loss, outputs)``, the model's outputs detached
    (``train_step_outputs``)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("lm.compile_train_step takes an nn.Module")
    if optimizer is None and isinstance(loss_fn, torch.optim.Optimizer):
        loss_fn, optimizer = None, loss_fn  # compile_train_step(model, optimizer)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("lm.compile_train_step takes a torch.optim.Optimizer: "
                        "compile_train_step(model, loss_fn, optimizer), or "
                        "compile_train_step(model, optimizer) for a model that returns its loss")
    if loss_fn is not None and not callable(loss_fn):
        raise TypeError(f"lm.compile_train_step: loss_fn must be callable (or None for a model "
                        f"that returns its loss), not {type(loss_fn).__name__}")
    if max_grad_norm is not None and not (isinstance(max_grad_norm, (int, float))
                                          and max_grad_norm > 0):
        raise ValueError(f"lm.compile_train_step: max_grad_norm must be a positive number "
                         f"(or None: no clipping), not {max_grad_norm!r}")
    return CompiledTrainStep(model, loss_fn, optimizer, target_key, dynamic,
                             None if max_grad_norm is None else float(max_grad_norm),
                             bool(return_outputs))


class _Call:
    """One call's batch: the positional and keyword inputs (tensors on the
    lazy device), the tensors in order, and the structure the guard keeps."""

    __slots__ = ("args", "kwargs", "tensors", "layout")

    def __init__(self, args: tuple, kwargs: dict):
        self.tensors: list = []
        self.args = tuple(self._take(a) for a in args)
        self.kwargs = {k: self._take(v) for k, v in kwargs.items()}
        # a tensor's place is marked by its type; other values are kept as given
        mark = lambda v: LazyTensor if isinstance(v, torch.Tensor) else v  # noqa: E731
        self.layout = (tuple(mark(a) for a in self.args),
                       tuple((k, mark(v)) for k, v in self.kwargs.items()))

    def _take(self, v):
        if isinstance(v, torch.Tensor):
            v = v if isinstance(v, LazyTensor) else v.to("lazy")
            self.tensors.append(v)
        return v

    def hashable(self) -> bool:
        try:
            hash(self.layout)
            return True
        except TypeError:
            return False


def _frozen(v):
    return tuple(_frozen(x) for x in v) if isinstance(v, list) else v


class _Plan:
    """A recorded step: its compiled entry and where its outputs go. Holds
    no node and no state data (only the constants the graph reads)."""

    def __init__(self, graph, entry, checks, n_lead, slots, seeds):
        self.key = graph.key
        self.entry = entry
        self.n_lead = n_lead
        self.family = None  # (size-family key, sizes) of its graph (``train_step_sizes``)
        self.checks = checks  # (exception type, message) per index-check flag
        # per output: ("state", i) | ("grad", i) | ("new", None) | ("loss", None)
        # | ("out", None) (return_outputs) | ("flag", None)
        self.slots = slots
        self.bound = graph.inputs[n_lead:]  # lifted scalars, seeds, other constants
        self.seeds = seeds  # positions in ``bound`` of random seeds, drawn anew per call
        self.specs = [v.spec for v in graph.outputs]
        self.no_grad: tuple[int, ...] = ()  # state positions of parameters left without a grad
        self.hyper: tuple = ()  # train_step_hyper.Bound: inputs made from param groups per call
        self.fixed: tuple = ()  # (group, key, value): unguarded keys this plan took as constants
        self.made: dict = {}  # train_step_hyper.bind's last inputs

    @property
    def rebound(self) -> frozenset:
        """Positions in ``bound`` given anew at each replay."""
        return frozenset(self.seeds).union(b.pos for b in self.hyper)

    reads: tuple = ()  # host_eval.Read: host reads of the batch, checked before a replay
    out_spec = None  # train_step_outputs.tensor_leaves' spec (return_outputs)

    def same_as(self, other: "_Plan") -> bool:
        """Two recordings of the same step: same graph, same constants."""
        if (self.key != other.key or self.seeds != other.seeds
                or self.hyper != other.hyper or self.fixed != other.fixed):
            return False
        if not host_eval.same_reads(self.reads, other.reads):
            return False
        rebound = self.rebound
        for i, (a, b) in enumerate(zip(self.bound, other.bound)):
            if a is b or i in rebound:
                continue
            if a.host is None or b.host is None or not torch.equal(a.host, b.host):
                return False
        return True


class CompiledTrainStep:
    def __init__(self, model, loss_fn, optimizer, target_key: str = "labels",
                 dynamic: bool = True, max_grad_norm: float | None = None,
                 return_outputs: bool = False):
        self.model = model
        self.max_grad_norm = max_grad_norm
        self.return_outputs = return_outputs
        self._out = None  # (return_outputs) this call's model outputs
        self.dynamic = dynamic
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.target_key = target_key
        # Kept: the guard reads every module's train() flag per call, and
        # walking model.modules() costs more than the rest of the guard.
        self._modules = list(model.modules())
        self._plans: dict = {}     # guard -> _Plan (replay) or str (why not)
        self._recorded: dict = {}  # guard -> the last recording, until two agree
        self._by_rank: dict = {}   # size-free guard -> (guard, its last recording)
        self._variants: dict = {}  # size-free guard -> SizeVariant (other batch sizes)
        self._lifted: set = set()  # (group, key) whose values replays bind (train_step_hyper)
        # loose guard -> why: a refusal holds for every learning rate (a
        # scheduler's new one each step recorded, and was refused, again)
        self._refused: dict = {}

    # -- what a recording depends on ----------------------------------------
    def _params(self) -> list:
        return self._members("_parameters")

    def _members(self, kind: str) -> list:
        """``model.parameters()`` (or ``buffers()``) of the kept modules, in
        the same order: their dicts read directly, at a third of the cost of
        torch's generators (this runs on every replayed call)."""
        seen, out = set(), []
        for m in self._modules:
            for t in getattr(m, kind).values():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    out.append(t)
        return out

    def _state(self) -> list[tuple[object, object, torch.Tensor]]:
        """(container, key, tensor) of every state tensor, in a fixed order."""
        out = [(None, None, p) for p in self._params()]
        out += [(None, None, b) for b in self._members("_buffers")]
        opt = self.optimizer
        for g in opt.param_groups:
            for p in g["params"]:
                st = opt.state.get(p)
                if st:
                    out += [(st, k, st[k]) for k in sorted(st) if isinstance(st[k], torch.Tensor)]
        return out

    def _guard(self, call: _Call, state, loose: bool = False) -> tuple | None:
        """The conditions a replay needs; None when they cannot be stated.
        ``loose``: with every hyperparameter's value left out (its
        ``structure`` kept), the conditions of a refusal."""
        opt = self.optimizer
        hyper, lifted = [], self._lifted
        for i, g in enumerate(opt.param_groups):
            for k in sorted(g):
                if k != "params":
                    v = _frozen(g[k])
                    hyper.append((k, hyperparams.structure(v) if loose or (i, k) in lifted
                                  else v))
        for g in opt.param_groups:
            for p in g["params"]:
                st = opt.state.get(p)
                if st:
                    hyper += [(k, st[k]) for k in sorted(st) if not isinstance(st[k], torch.Tensor)]
        if not all(isinstance(v, _HASHABLE) for _, v in hyper):
            return None  # e.g. a tensor learning rate: its value is not guarded
        return (call.layout, tuple((tuple(b.shape), b.dtype) for b in call.tensors),
                tuple(id(t) for _, _, t in state),
                tuple(hyper), tuple(m.training for m in self._modules),
                torch.is_grad_enabled(), autocast_state(), current_target().cache_key,
                current_config().key)

    # -- a call --------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        loss = self._call(*args, **kwargs)
        if not self.return_outputs:
            return loss
        out, self._out = self._out, None
        return loss, out

    def _call(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], Mapping):
            args, kwargs = (), dict(args[0])  # step(batch_dict)
        self._check_form(args, kwargs)
        call = _Call(args, kwargs)
        state = self._state()
        guard = self._guard(call, state) if call.hashable() else None
        if guard is not None:
            plan = self._plans.get(guard)
            if plan is None and self._variants:
                plan = self._new_size(guard, call, state)
            if plan is None and self._refused:
                plan = self._refused.get(self._guard(call, state, loose=True))
        elif call.hashable():
            plan = "a hyperparameter is a tensor"
        else:
            plan = "a non-tensor input cannot be hashed"
        if isinstance(plan, _Plan):
            return self._replay(plan, call, state)
        if plan is not None:
            metrics.counter_inc("TrainStepPlain")
            return self._plain(call)
        return self._record(call)

    def _check_form(self, args, kwargs) -> None:
        """A call that cannot be a training step says so before it runs."""
        if self.loss_fn is None:
            if not args and not kwargs:
                raise TypeError("step(*inputs) or step(**batch): the step needs the model's inputs")
        elif kwargs:
            if args or self.target_key not in kwargs:
                raise TypeError(
                    f"step(**batch) with a loss_fn: the batch holds the model's keyword inputs "
                    f"and the target under {self.target_key!r} (compile_train_step(..., "
                    f"target_key=...) names another), with no positional inputs; got "
                    f"{len(args)} positional and keys {sorted(kwargs)}")
        elif len(args) < 2:
            raise TypeError("step(*inputs, target): the loss is loss_fn(model(*inputs), target)")

    def _loss(self, call: _Call) -> torch.Tensor:
        if self.loss_fn is None:
            out = self.model(*call.args, **call.kwargs)
        elif call.kwargs:
            out = self.model(**{k: v for k, v in call.kwargs.items() if k != self.target_key})
        else:
            out = self.model(*call.args[:-1])
        if self.return_outputs:
            self._out = out
        if self.loss_fn is None:
            return outputs.loss_of(out)
        return self.loss_fn(out, call.kwargs[self.target_key] if call.kwargs else call.args[-1])

    def reset(self) -> None:
        """Forget the recordings: the next calls record again. For a change
        the guard cannot see (a global flag the forward reads)."""
        self._plans.clear()
        self._refused.clear()
        self._recorded.clear()
        self._by_rank.clear()
        self._variants.clear()

    def _plain(self, call: _Call, mark: bool = True) -> torch.Tensor:
        """The step on the lazy device; ``mark``: then ``mark_step()``, as the
        plain training loop does (else the next step's graph would hold this one)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self._loss(call)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        if self.return_outputs:
            self._out = outputs.detached(self._out)
        if mark:
            mark_step()
        return loss.detach()

    def _refuse(self, call: _Call, moved, why: str) -> None:
        """Plain steps from now on under these conditions (with the moved
        CPU state back on the CPU, so the guard is the one later calls see)."""
        for st, k, t in moved:
            st[k] = t.cpu()
        state = self._state()
        guard = self._guard(call, state)
        self._plans[guard] = why
        self._refused[self._guard(call, state, loose=True)] = why
        self._recorded.pop(guard, None)
        metrics.counter_inc("TrainStepRefused")
        log.warning("lazy-mlir: compile_train_step runs the plain lazy step: %s", why)

    def _why_plain(self, changed: list[str]) -> str:
        """Why a recording cannot replay, from the ``sync::`` (host reads) and
        ``aten::`` (ops run eagerly) counters it moved, each with its own
        hint: ``capturable=True`` for host reads only (a non-capturable
        optimizer reads its step count there), ``LAZY_MLIR_DEBUG=1`` for the
        eager ops (it says why each one runs eagerly)."""
        reads = [n.split("::")[1] for n in changed if n.startswith("sync::")]
        eager = [n.split("::")[1] for n in changed if n.startswith("aten::")]
        parts = []
        if reads:
            hint = ("; create the optimizer with capturable=True to keep its step count "
                    "on the device" if any(g.get("capturable") is False
                                           for g in self.optimizer.param_groups) else "")
            parts.append(f"the step reads tensors on the host ({', '.join(reads)}){hint}")
        if eager:
            parts.append(f"the step runs ops eagerly ({', '.join(eager)}); "
                         "LAZY_MLIR_DEBUG=1 says why each does")
        if any(n in COLLECTIVES for n in reads + eager):  # lm.distributed (#28)
            parts.append("a collective (all-reduce) runs on the host between two graphs, "
                         "which one replayed graph cannot hold")
        return "; ".join(parts)

    def _record(self, call: _Call) -> torch.Tensor:
        moved = self._state_to_lazy()
        state = self._state()
        guard = self._guard(call, state)  # moved state tensors are new objects
        execute([value_of(t) for _, _, t in state] + [value_of(b) for b in call.tensors])
        lead = [value_of(t).data for _, _, t in state] + [value_of(b).data for b in call.tensors]
        if any(t._view for _, _, t in state):
            self._refuse(call, moved, "a state tensor is a view of another")
            return self._plain(call)
        before = metrics.host_reads()
        drawn, lifts = random.log_seeds(), fused_optim.log_lifted()
        reads = host_eval.log_reads(lead[len(state):], lead[:len(state)])  # (guarded reads)
        try:
            with bounds.in_graph(), early_outputs.one_graph():
                loss = self._plain(call, mark=False)
        finally:
            random.stop_logging(drawn)
            fused_optim.stop_lift_log(lifts)
            host_eval.stop_logging()
        changed = metrics.changed_since(before)
        why = self._why_plain(changed) if changed else (
            self.return_outputs and outputs.why_not(self._out))
        if changed or why:
            self._refuse(call, moved, why)
            mark_step()
            return loss
        plan = self._launch(state, lead, loss, drawn)
        plan.reads = tuple(reads)
        if self._lift(plan, lifts):  # (the guard leaves out the values it now binds)
            guard = self._guard(call, state)
        last = self._recorded.pop(guard, None)
        if last is not None and not plan.same_as(last):
            self._refuse(call, [], "a value the step computes on the host changes from "
                                    "step to step (two recordings differ)")
        elif last is not None:
            self._plans[guard] = plan
            self._vary(guard, plan, len(state))
        elif not self._vary(guard, plan, len(state)):
            self._recorded[guard] = plan
        metrics.counter_inc("TrainStepRecorded")
        return loss

    def _lift(self, plan: _Plan, lifts: list) -> bool:
        """The hyperparameters ``plan`` binds per replay, and those the
        guard leaves out that it does not (checked per replay instead).
        The keys it binds leave the guard from now on: whether they were new."""
        groups = self.optimizer.param_groups
        plan.hyper = hyperparams.bindings(lifts, self.optimizer, plan.bound)
        plan.fixed = hyperparams.fixed(self._lifted, plan.hyper, groups)
        new = hyperparams.keys(plan.hyper) - self._lifted
        self._lifted |= new
        return bool(new)

    def _state_to_lazy(self) -> list:
        moved = []
        for st, k, t in self._state():
            if st is not None and not isinstance(t, LazyTensor):
                st[k] = t.to("lazy")
                moved.append((st, k, st[k]))
        return moved

    def _launch(self, state, lead, loss, drawn) -> _Plan:
        """Run the recorded step as one graph (leading inputs: state, batch)."""
        roots, slots = [], []
        for i, (_, _, t) in enumerate(state):
            v = value_of(t)
            if v.data is not lead[i]:
                roots.append(v)
                slots.append(("state", i))
        for i, p in enumerate(self._params()):
            if p.grad is not None:
                roots.append(value_of(p.grad))
                slots.append(("grad", i))
        # State the step created (the optimizer's first step): computed here
        # too, not recomputed from the batch by a graph of its own later.
        # Such a recording is never replayed (the next guard sees the state).
        known = {id(t) for _, _, t in state}
        for _, _, t in self._state():
            if id(t) not in known and isinstance(t, LazyTensor) and value_of(t).pending:
                roots.append(value_of(t))
                slots.append(("new", None))
        roots.append(value_of(loss))
        slots.append(("loss", None))
        out_leaves, out_spec = ([], None) if not self.return_outputs else (
            outputs.tensor_leaves(self._out))
        roots += [value_of(t) for t in out_leaves]
        slots += [("out", None)] * len(out_leaves)
        roots = [v if v.pending else emit(torch.ops.aten.clone.default, (v,), {})[0]
                 for v in roots]
        graph, entry, checks = launch(roots, lead)
        if len(graph.outputs) > len(slots):
            slots.append(("flag", None))
        by_id = {id(d): i for i, d in enumerate(graph.inputs[len(lead):])}
        seeds = tuple(by_id[id(d)] for d in drawn if id(d) in by_id)  # (in drawing order)
        plan = _Plan(graph, entry, checks, len(lead), slots, seeds)
        plan.out_spec = out_spec
        if self.dynamic:
            plan.family = sizes.family(graph, current_target())
        cleared = {id(p) for g in self.optimizer.param_groups for p in g["params"]}
        given = {i for k, i in slots if k == "grad"}
        plan.no_grad = tuple(i for i, (_, _, t) in enumerate(state)
                             if id(t) in cleared and i not in given)
        return plan

    def _replay(self, plan: _Plan, call: _Call, state) -> torch.Tensor:
        groups = self.optimizer.param_groups
        if ((plan.reads and not host_eval.reads_hold(plan.reads, [value_of(b).data
                                                                 for b in call.tensors]))
                or (plan.fixed and not hyperparams.fixed_hold(plan.fixed, groups))):
            metrics.counter_inc("TrainStepPlain")  # (a host read of this batch differs)
            return self._plain(call)
        values = [value_of(t) for _, _, t in state] + [value_of(b) for b in call.tensors]
        pending = [v for v in values if v.pending]
        if pending:  # the state was changed lazily since the last step
            execute(pending)
        bound = list(plan.bound)
        for i in plan.seeds:
            bound[i] = random.again(bound[i])  # (a seed, or a host fill: drop path's rand)
        hyperparams.bind(plan.hyper, groups, bound, plan.made)
        inputs = [v.data for v in values] + bound
        datas = [DeviceData(s) for s in plan.specs]
        # The outputs are bound before the launch, which is the last thing
        # the replay does: in ``step(); loss.item()`` the caller then reaches
        # the wait at once and runs the job itself, as after the plain loop's
        # mark_step (``runtime/run_queue``). Bound after it (~2 ms for GPT-2's
        # 262 outputs), the job went to the run thread whenever a core was
        # free: a hand-off, and on that thread GPT-2 medium's step faulted
        # its 500 MB of transient memory in again (host_memory), ~200 ms CPU.
        for i in plan.no_grad:  # zero_grad(set_to_none=True) for the grads the graph does not give
            state[i][2].grad = None
        loss, outs = None, []
        for (kind, i), d in zip(plan.slots, datas):
            if kind == "state":
                assign(state[i][2], Value.of_data(d))  # as an in-place write leaves it
            elif kind == "grad":
                state[i][2].grad = wrap_value(Value.of_data(d))
            elif kind == "loss":
                loss = wrap_value(Value.of_data(d))
            elif kind == "out":
                outs.append(wrap_value(Value.of_data(d)))
        if plan.out_spec is not None:
            self._out = outputs.rebuild(plan.out_spec, outs)
        run_entry(plan.entry, inputs, datas, plan.checks)
        metrics.counter_inc("TrainStepReplayed")
        return loss

    # -- other batch sizes (``train_step_sizes``) -----------------------------
    def _vary(self, guard, plan: _Plan, n_state: int) -> bool:
        """Keep ``plan`` as its batch ranks' last recording. Where it agrees
        but for sizes with the last one at another batch shape, both replay
        from now on and a variant is made; one more recording at a third
        shape that agrees with it confirms the variant's expressions of the
        sizes (``confirmed``): then it serves other sizes unrecorded.
        Whether ``plan`` replays from now on."""
        if plan.family is None:
            return False
        loose = sizes.size_free(guard)
        last = self._by_rank.get(loose)
        self._by_rank[loose] = (guard, plan)
        variant = self._variants.get(loose)
        if variant is not None:
            if variant.confirmed or guard in variant.guards:
                return False
            if sizes.agree(plan, variant.plan, n_state) is None:  # (its expressions fail)
                del self._variants[loose]
                return False
            variant.confirmed = True
            self._keep((guard, plan), variant)
            return True
        if last is None or last[0] == guard or isinstance(self._plans.get(last[0]), str):
            return False  # (refused: host values vary)
        variant = sizes.agree(plan, last[1], n_state)
        if variant is None:
            return False
        variant.guards = {guard, last[0]}
        self._variants[loose] = variant
        self._keep((guard, plan), variant)
        self._keep(last, variant)
        return True

    def _keep(self, recorded, variant) -> None:
        """A recording replayed from now on, on its own module where that
        is loaded, else on the variant's."""
        g, own = recorded
        self._recorded.pop(g, None)
        if not isinstance(self._plans.get(g), str):
            self._plans[g] = own if own.entry.state == LOADED else variant.plan

    def _new_size(self, guard, call: _Call, state) -> _Plan | None:
        """The variant's plan where it admits this call's batch shapes
        (kept under ``guard``: replayed from now on), else None."""
        variant = self._variants.get(sizes.size_free(guard))
        plan = variant and variant.confirmed and variant.plan_for([t for _, _, t in state] + call.tensors)
        if not plan:
            return None
        self._plans[guard] = plan
        metrics.counter_inc("TrainStepNewSize")
        return plan
