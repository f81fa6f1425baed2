"""``export_train_step``: one training step as an artifact.

The step (forward, loss, backward, optimizer update) is captured on the lazy
device as one graph, the way ``mark_step`` captures a training loop: lazy
copies of the parameters, buffers and optimizer state are the graph's leading
inputs, then the batch; its outputs are their new values and the loss. The
artifact's entry point is therefore the pure function

    train_step(state..., inputs..., target) -> (new state..., loss)

and ``params.irpa`` holds the initial state. ``runner.TrainStep`` runs it with
numpy alone, keeping the state on the device between steps.

Guarantees:

- The model and optimizer passed in are not changed: the capture runs on
  copies (``copy.deepcopy`` of the model, a new optimizer of the same class
  with the same param groups and ``state_dict``).
- Learning rates and other scalars the optimizer passes to tensor ops are
  lifted to graph inputs by the lazy device; they are stored with the module
  (``const.<i>`` parameters), so the artifact trains with the hyperparameters
  the optimizer had at export time.
- A step that reads tensors on the host (e.g. Adam's ``step`` count with
  ``capturable=False`` calls ``.item()``), that creates optimizer state (the
  first step of SGD with momentum, Adam, ...) or that changes non-tensor
  state is refused with ``ExportError``: the exported function would not be
  the same step every time.
"""
from __future__ import annotations

import copy
import gc
import time

import torch

from ..metrics import host_reads
from .capture import Captured, ExportError, TensorInfo, input_names, refuse_host_reads


def _state_snapshot(opt) -> dict:
    """Per parameter, its optimizer state's keys and non-tensor values."""
    return {id(p): {k: (None if isinstance(v, torch.Tensor) else v)
                    for k, v in opt.state[p].items()}
            for g in opt.param_groups for p in g["params"] if p in opt.state}


def _copy_optimizer(optimizer, by_id: dict):
    groups = [{**g, "params": [by_id[id(p)] for p in g["params"]]}
              for g in optimizer.param_groups]
    try:
        new = type(optimizer)(groups, **optimizer.defaults)
    except TypeError:  # an optimizer whose defaults are not all constructor arguments
        new = type(optimizer)(groups)
    new.load_state_dict(optimizer.state_dict())
    return new


def _refuse_bad_arguments(model, optimizer, example_batch: tuple, config) -> dict:
    """Check what ``export_train_step`` was given; the parameters' names by id."""
    if not isinstance(model, torch.nn.Module):
        raise ExportError("lazy-mlir: export_train_step takes an nn.Module")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ExportError("lazy-mlir: export_train_step takes a torch.optim.Optimizer")
    if len(example_batch) < 2:
        raise ExportError("lazy-mlir: example_batch is (inputs..., target): the loss is "
                          "loss_fn(model(*inputs), target)")
    on = {t.device.type for t in list(model.parameters()) + list(model.buffers())}
    if on - {"cpu"}:
        raise ExportError(f"lazy-mlir: export_train_step reads the model on the CPU; it is "
                          f"on {', '.join(sorted(on))} (call model.cpu() first)")
    names = {id(p): n for n, p in model.named_parameters()}
    for g in optimizer.param_groups:
        for p in g["params"]:
            if id(p) not in names:
                raise ExportError("lazy-mlir: the optimizer updates a tensor that is not a "
                                  "parameter of the model")
    if config.input == "torch":
        raise ExportError("lazy-mlir: export compiles linalg; set the pipeline config's "
                          "input to 'linalg'")
    return names


def _lazy_copies(model, optimizer, names: dict):
    """Lazy copies of the model and optimizer, and the step's state in order:
    parameters, buffers, then optimizer state per parameter (as ``(p, key)``
    in ``opt_keys``)."""
    lazy_model = copy.deepcopy(model).to("lazy")
    lazy_params = dict(lazy_model.named_parameters())
    by_id = {id(p): lazy_params[names[id(p)]] for p in model.parameters()}
    opt = _copy_optimizer(optimizer, by_id)
    state: list[tuple[str, torch.Tensor]] = list(lazy_params.items())
    state += [(n, b) for n, b in lazy_model.named_buffers()]
    lazy_names = {id(p): n for n, p in lazy_params.items()}
    opt_keys = []
    for g in opt.param_groups:
        for p in g["params"]:
            for k in sorted(opt.state.get(p, {})):
                v = opt.state[p][k]
                if isinstance(v, torch.Tensor):
                    if v.device.type != "lazy":  # e.g. a CPU step count: an input too
                        v = opt.state[p][k] = v.to("lazy")
                    opt_keys.append((p, k))
                    state.append((f"optimizer.{lazy_names[id(p)]}.{k}", v))
    return lazy_model, opt, state, opt_keys


def _record_step(lazy_model, loss_fn, opt, optimizer, inputs):
    """Record forward, loss, backward and the update; the loss. Refuses a step
    that reads the host or changes the optimizer's non-tensor state."""
    from ..lazy import bounds, early_outputs
    before_state = _state_snapshot(opt)
    before = host_reads()
    opt.zero_grad(set_to_none=True)
    with bounds.unchecked():  # exported: indices clamped, not checked (bounds.py)
        loss = loss_fn(lazy_model(*inputs[:-1]), inputs[-1])
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise ExportError("lazy-mlir: loss_fn must return a one-element tensor")
    with bounds.unchecked(), early_outputs.one_graph():
        loss.backward()
    refuse_host_reads(before, "the forward or backward pass")
    before = host_reads()
    with bounds.unchecked():
        opt.step()
    # torch.optim's Adam family reads its step count with .item() unless
    # capturable=True, which it allows only on CUDA-like devices.
    refuse_host_reads(before, f"{type(optimizer).__name__}.step()")
    after_state = _state_snapshot(opt)
    if after_state != before_state:
        made = sorted({k for i, d in after_state.items() for k in d
                       if k not in before_state.get(i, {})})
        if made:
            raise ExportError(
                f"lazy-mlir: {type(optimizer).__name__} creates its state ({', '.join(made)}) "
                "in its first step, so that step differs from the rest; take one step "
                "first (optimizer.step() after a backward, eagerly on the CPU) and export "
                "then")
        raise ExportError(f"lazy-mlir: {type(optimizer).__name__} changes non-tensor state "
                          "during a step; the exported step would not repeat it")
    return loss


def capture_train_step(model, loss_fn, optimizer, example_batch: tuple, config, target,
                       batch_names=None) -> tuple[Captured, list[str]]:
    """The step as a ``Captured`` (lowered for ``target`` as mark_step lowers
    for it) and the names of its state, in order."""
    from ..lazy.capture import emit, value_of
    from ..graph.program import Graph
    from ..lazy.sync import execute, host_of
    from ..pipeline.compile import lower_graph
    names = _refuse_bad_arguments(model, optimizer, example_batch, config)
    t0 = time.perf_counter()
    lazy_model, opt, state, opt_keys = _lazy_copies(model, optimizer, names)
    inputs = [t.detach().cpu().to("lazy") for t in example_batch]
    for _, t in state:
        execute([value_of(t)])
    leading = [value_of(t).data for t in [t for _, t in state] + inputs]
    loss = _record_step(lazy_model, loss_fn, opt, optimizer, inputs)

    # Outputs: the new state (same order, read again: a module may rebind a
    # buffer in its forward), then the loss.
    news = [value_of(t) for t in lazy_model.parameters()]
    news += [value_of(b) for b in lazy_model.buffers()]
    news += [value_of(opt.state[p][k]) for p, k in opt_keys]
    news.append(value_of(loss.reshape(())))
    roots = [v if v.pending else emit(torch.ops.aten.clone.default, (v,), {})[0]
             for v in news]
    graph = Graph.build(roots, leading)
    stages = lower_graph(graph, target, config)

    n_state = len(state)
    model_inputs = input_names(model.forward, len(inputs) - 1,
                               None if batch_names is None else list(batch_names)[:-1])
    target = "target" if batch_names is None else list(batch_names)[-1]
    args: list = [(n, host_of(d).detach().clone()) for (n, _), d in
                  zip(state, graph.inputs[:n_state])]
    args += [TensorInfo(n, t.dtype, tuple(t.shape))
             for n, t in zip(model_inputs + [target], example_batch)]
    for i, d in enumerate(graph.inputs[len(leading):]):
        args.append((f"const.{i}", host_of(d).detach().clone()))
    outputs = [TensorInfo(n, v.spec.dtype, v.spec.shape)
               for n, v in zip([n for n, _ in state] + ["loss"], graph.outputs)]
    captured = Captured(stages[-1].text, args, outputs, "tuple", graph.key, "lazy",
                        {"capture+lower": time.perf_counter() - t0})
    state_names = [n for n, _ in state]
    del lazy_model, opt, state, inputs, loss, news, roots, graph
    gc.collect()  # drop the lazy copies now, so no later mark_step computes them
    return captured, state_names


def export_train_step(model, loss_fn, optimizer, example_batch, path=None, target="cpu",
                      params: str = "external", *, config=None, batch_names=None):
    """Export one training step of ``model`` under ``optimizer`` to the
    artifact directory ``path``; returns ``path``.

    ``example_batch``: (inputs..., target) tensors; the step computes
    ``loss_fn(model(*inputs), target)``, backward and ``optimizer.step()``.
    The artifact's ``params.irpa`` holds the current parameters, buffers and
    optimizer state as the initial state. ``params="embed"`` puts the
    optimizer's constants (learning rate, ...) into the module instead of
    the archive. ``batch_names`` names the batch tensors (default: the
    forward's argument names, then ``target``).
    """
    from ..dialects.runner import PipelineError
    from ..config import current_config
    from ..targets import Target, get_target
    from .writer import PARAMS_MODES, prepare_path, write_artifact
    t = target if isinstance(target, Target) else get_target(target)
    if isinstance(example_batch, torch.Tensor):
        example_batch = (example_batch,)
    example_batch = tuple(example_batch)
    if not all(isinstance(a, torch.Tensor) for a in example_batch):
        raise ExportError("lazy-mlir: example_batch must be a tuple of tensors")
    if params not in PARAMS_MODES:
        raise ExportError(f"lazy-mlir: params must be one of {', '.join(PARAMS_MODES)}, "
                          f"not {params!r}")
    path = prepare_path(path)
    config = config or current_config()
    # An artifact runs without PyTorch.
    config = config.replace(host_blas=False, host_rnn=False, host_attention=False)
    try:
        captured, state = capture_train_step(model, loss_fn, optimizer, example_batch, config,
                                             t, batch_names)
    except PipelineError as e:  # a lowering failed: its message names the repro
        raise ExportError(str(e)) from None
    extra = {"train_step": {
        "model": type(model).__name__,
        "optimizer": type(optimizer).__name__,
        "loss_fn": getattr(loss_fn, "__name__", type(loss_fn).__name__),
        "hyperparameters": [{k: v for k, v in g.items() if k != "params"
                             and isinstance(v, (int, float, bool, str, type(None)))}
                            for g in optimizer.param_groups],
    }}
    return write_artifact(captured, path, t, config, params=params, kind="train_step",
                          entry_name="train_step", state=state, extra=extra)
