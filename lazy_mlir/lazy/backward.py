"""``loss.backward()`` on the lazy device as ONE recorded node.

Autograd runs a backward op by op, and each op is a ``__torch_dispatch__``
call that capture records: about half of a small model's host cost per step
(GPT-2 tiny: 4.8 ms of 10.6 ms thread CPU). PyTorch's compiled autograd
(``torch._dynamo.compiled_autograd``) already turns a backward into one fx
graph, cached by the autograd graph's structure (computed in C++), and on a
cache hit calls our function once with the tensors the backward reads. Here
that function is a ``lazy_mlir::subgraph`` node (``ops/subgraph.py``): the
backward traced once to aten, then one node a step, its outputs the
gradients, which are accumulated into ``.grad`` as ``AccumulateGrad`` does.

Used by ``LazyTensor.backward`` (``loss.backward()``, ``scaler.scale(loss)
.backward()``) unless ``create_graph`` or ``inputs`` is given, a live lazy
tensor has a hook (``register_hook``, ``register_post_accumulate_grad_hook``:
``lm.distributed.ddp``'s gradient buckets), a ``torch.distributed`` process
group exists, or ``LAZY_MLIR_BACKWARD=ops``. A backward whose graph holds anything but
autograd's own formulas and gradient accumulation (tensor or module hooks,
custom ``autograd.Function``s, DDP's reducer hooks) or reads a tensor that
is not lazy runs its compiled-autograd graph op by op: the same ops as
without it (counter ``backward::ops``; ``backward::one_node`` counts the
others).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os

import torch
import torch.fx as fx

from .. import metrics
from ..ops import subgraph_sizes
from . import masked_backward
from . import tensor as _tensor
from ..ops import support as _support
from .capture import _make_scalar
from .decompose import reads_values_when_imported
from .kinds import RANDOM
from .supported import dtype_compiled
from .sync import cut_before_backward, launch_before_backward
from .tensor import LazyTensor

log = logging.getLogger("lazy_mlir")

try:
    from torch._dynamo import compiled_autograd as _ca
    from torch._dynamo import external_utils as _external
except ImportError:  # (a torch without compiled autograd: op by op)
    _ca = None


def enabled() -> bool:
    return _ca is not None and os.environ.get("LAZY_MLIR_BACKWARD", "one") != "ops"


def backward(tensor, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """``tensor.backward(...)``, through compiled autograd where it can."""
    if (create_graph or inputs is not None or _tensor.hooked or not enabled()
            or _ca.in_compiled_autograd_region or _distributed()):
        return torch.Tensor.backward(tensor, gradient, retain_graph, create_graph, inputs)
    try:
        with _compiled_autograd():
            return torch.Tensor.backward(tensor, gradient, retain_graph)
    except RuntimeError as e:
        # Compiled autograd refuses some graphs while collecting them, before
        # any formula runs (an in-place op on a view: "view_fn not supported
        # by compiled autograd", MobileNet's ReLU6): autograd's own engine
        # runs those, op by op.
        if "compiled autograd" not in str(e):
            raise
        metrics.counter_inc("backward::ops")
        _log_once(f"lazy-mlir: backward runs op by op: {e}")
    return torch.Tensor.backward(tensor, gradient, retain_graph, create_graph, inputs)


_logged: set[str] = set()


def _log_once(message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        log.info(message)


def _distributed() -> bool:
    """A process group exists: DDP's C++ reducer hooks into autograd's own
    engine (compiled autograd refuses to run beside it)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


@contextlib.contextmanager
def _compiled_autograd():
    ca = torch._C._dynamo.compiled_autograd
    prior = ca.set_autograd_compiler(functools.partial(_LazyCompilerInstance, _compile), False)
    was_enabled, _ca.compiled_autograd_enabled = _ca.compiled_autograd_enabled, True
    try:
        with torch.autograd.set_multithreading_enabled(False):
            yield
    finally:
        _ca.compiled_autograd_enabled = was_enabled
        ca.set_autograd_compiler(*prior)


class _LazyCompilerInstance(_ca.AutogradCompilerInstance if _ca else object):
    """Compiled autograd's tracer, with fake tensors of lazy ones made on
    the lazy device (FakeTensorMode cannot convert a wrapper subclass)."""

    def wrap_fake(self, x, source):
        if type(x) is not LazyTensor:
            return super().wrap_fake(x, source)
        from torch._subclasses.fake_tensor import FakeTensor
        meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
        return FakeTensor(self.fake_tensor_mode, meta, x.device)


# Templates of symbolic sizes per backward graph: sizes that keep escaping
# them (a structure that depends on a size) are traced one by one.
MAX_SIZED = 4


def _compile(gm: fx.GraphModule):
    return _OneNodeBackward(gm)


# Calls a backward graph may make beside aten ops and getitem.
_FINAL_CALLBACKS = _external.FakeCompiledAutogradEngine._exec_final_callbacks_stub if _ca else None
_ALLOWED = {operator.getitem, _external.call_accumulate_grad, _external.call_backward,
            _FINAL_CALLBACKS,
            _external.unwrap_maybe_dynamic_int} if _ca else set()  # (a size: concrete when traced)


def _is_formula(target) -> bool:
    """An autograd formula's functional form (compiled autograd's ops) or
    an aten/torch function: traceable to aten."""
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    name = getattr(target, "__name__", "")
    module = getattr(target, "__module__", "") or ""
    if module in ("_operator", "operator", "math"):  # (arithmetic on sizes)
        return True
    return module.startswith("torch._dynamo.compiled_autograd") or (
        module.startswith("torch") and not module.startswith("torch._dynamo") and name != "")


class _OneNodeBackward:
    """The function compiled autograd calls for one backward graph."""

    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.why_not = _refusal(gm)
        self.core = None
        if self.why_not is None:
            try:
                self.core = _gradients_graph(gm)
            except NotImplementedError as e:
                self.why_not = str(e)
        # (scalars, sizes, contexts) -> (template key, used inputs, parameters) or False
        self.templates: dict = {}
        # (scalars, non-dynamic sizes, contexts, used inputs) -> templates
        # traced with symbolic sizes, or False (op by op)
        self.sized: dict = {}
        self.static: set = set()  # (as ``sized``'s keys) where a symbolic trace failed
        self.seen: set = set()  # (as ``sized``'s keys) traced once
        self.contexts = _function_contexts(gm)
        self.ops = None  # (``gm`` as it runs op by op: made at its first such run)
        if self.why_not:
            log.info("lazy-mlir: backward runs op by op: %s", self.why_not)

    def __call__(self, inputs, sizes, scalars, hooks, packed_inputs):
        if self.why_not is None:
            done = self._one_node(inputs, sizes, scalars, hooks, packed_inputs)
            if done is not None:
                return done
        metrics.counter_inc("backward::ops")
        if self.ops is None:
            self.ops = _op_by_op(self.gm)
        return self.ops(inputs, sizes, scalars, hooks, packed_inputs)

    def _one_node(self, inputs, sizes, scalars, hooks, packed_inputs):
        # (compiled autograd makes a graph dynamic in a size it saw change:
        # that size is then an argument, an empty [0, n] tensor)
        structure = (tuple(scalars), tuple(None if isinstance(z, torch.Tensor) else z
                                           for z in sizes),
                     tuple(hooks[i]._compiled_autograd_key() for i in self.contexts))
        # (and the inputs' shapes: compiled autograd reuses its graph for saved
        # tensors of new sizes where no saved size changed, as the index
        # count of an EmbeddingBag's backward, and a template traced at
        # static sizes holds the old ones: the graph failed to compile)
        key = (structure, tuple(z.shape[1] for z in sizes if isinstance(z, torch.Tensor)),
               tuple(t.shape for t in inputs if isinstance(t, torch.Tensor)))
        entry = self.templates.get(key)
        if entry is None:
            entry = self.templates[key] = self._template(structure, inputs, sizes, scalars,
                                                         hooks, packed_inputs)
        if entry is False:
            return None
        template, used, params = entry
        tensors = [t if type(t) is LazyTensor else _lifted(t) for t in (inputs[i] for i in used)]
        if any(t is None for t in tensors):
            return None
        if cut_before_backward(template):  # (its forward runs while the rest is captured)
            launch_before_backward(template)
        grads = torch.ops.lazy_mlir.subgraph(tensors, template)
        with torch.no_grad():
            for i, g in zip(params, grads):
                p = inputs[i]
                if p.grad is None:
                    p.grad = g
                else:
                    p.grad.add_(g)
        metrics.counter_inc("backward::one_node")
        return []

    def _template(self, structure, inputs, sizes, scalars, hooks, packed_inputs):
        """(template key, used inputs, parameters) at these sizes, or False:
        a template traced before for other sizes where it fits them, else
        one traced now."""
        params = self.core[1]
        used = [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
        tensors = [inputs[i] for i in used]
        carriers = [z for z in sizes if isinstance(z, torch.Tensor)]
        structure = (structure, tuple(used))
        sized = self.sized.get(structure, [])
        if sized is False:
            return False
        for traced in sized:
            template = traced.at(tensors, carriers)
            if template is not None:
                metrics.counter_inc("backward::resized")
                return template.key, used, params
        why = _foreign_function(self.core[0], hooks)
        if why is not None:
            log.info("lazy-mlir: backward runs op by op: %s", why)
            self.sized[structure] = False
            return False
        # (first sight at static sizes, traced as they are; symbolic once a
        # size changed: compiled autograd's carriers, or this structure seen
        # before. A symbolic trace costs several plain ones: a model that
        # never changes its sizes should not pay it.)
        symbolic = (bool(carriers) or structure in self.seen) and len(sized) < MAX_SIZED \
            and structure not in self.static
        self.seen.add(structure)
        traced = self._trace(structure, inputs, used, sizes, scalars, hooks, packed_inputs,
                             symbolic)
        if traced is None:
            return False
        if symbolic and not traced.symbolic:  # (every size fixed by the trace: a loop
            self.static.add(structure)        # over time steps; later sizes trace static)
        why = _uncompilable(traced.gm)
        if why is not None:  # (op by op, capture decomposes it or falls back, counted)
            log.info("lazy-mlir: backward runs op by op: %s", why)
            self.sized[structure] = False
            return False
        if traced.symbolic:
            self.sized[structure] = sized + [traced]
        template = traced.at(tensors, carriers)
        return False if template is None else (template.key, used, params)

    def _trace(self, structure, inputs, used, sizes, scalars, hooks, packed_inputs, symbolic):
        """The backward as a function of the used inputs and the size
        carriers, traced with symbolic sizes (else, or where that fails, at
        these sizes only); None where it cannot be traced."""
        core, params = self.core
        n = len(used)

        def grads(*args):
            full = list(inputs)
            for i, t in zip(used, args[:n]):
                full[i] = t
            carriers = iter(args[n:])
            at = [next(carriers) if isinstance(z, torch.Tensor) else z for z in sizes]
            outs = core(full, at, scalars, hooks, packed_inputs)
            return tuple(g.contiguous() if full[i].is_contiguous() else g
                         for i, g in zip(params, outs))
        tensors = [inputs[i] for i in used]
        carriers = [z for z in sizes if isinstance(z, torch.Tensor)]
        for attempt in ((True, False) if symbolic else (False,)):
            metrics.counter_inc("backward::traced")
            try:
                traced = subgraph_sizes.trace_sized(grads, tensors, carriers, symbolic=attempt)
            except Exception as e:  # noqa: BLE001 (any trace failure: op by op, as before)
                log.info("lazy-mlir: tracing the backward%s failed: %s",
                         " with symbolic sizes" if attempt else "", e)
                if attempt:
                    self.static.add(structure)  # (its later sizes: traced as they are)
                continue
            if reads_values_when_imported(traced.gm):
                log.info("lazy-mlir: backward runs op by op: a decomposition reads tensor values")
                return None
            return traced
        return None


def _lifted(t: torch.Tensor):
    """A 0-dim host tensor (a Python number a formula saved, as GELU's
    0.044715) as capture lifts scalars: a reused lazy 0-dim input, not a
    constant, so another value is another input, not another graph."""
    if t.dim() != 0 or t.device.type != "cpu":
        return None
    return _make_scalar(t.item(), t.dtype)


def _uncompilable(gm: fx.GraphModule) -> str | None:
    """Why the pipeline would not compile one of ``gm``'s ops as capture
    would record it: not in the dialect, denied, random, or of a dtype it
    does not lower."""
    for node in gm.graph.nodes:
        op = node.target
        if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
            continue
        dtypes = [v.dtype for v in (node.meta.get("val"), *(
            a.meta.get("val") for a in node.all_input_nodes)) if isinstance(v, torch.Tensor)]
        for dtype in dtypes:
            if not dtype_compiled(op, dtype):
                return f"{op} on {dtype} is not compiled"
        if op in RANDOM or not (_support.op_is_supported(op) or any(d.is_complex for d in dtypes)):
            return f"{op} is not compiled"
    return None


def _foreign_function(gm: fx.GraphModule, hooks) -> str | None:
    """Why a custom ``autograd.Function``'s backward in ``gm`` may not be
    traced once and replayed: only lazy-mlir's own (``lazy/rnn.py``) are
    known to do nothing but tensor ops; a user's may log, count or branch on
    values, which a replay would skip."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _external.call_backward:
            ctx = node.args[0]
            cls = hooks[ctx.args[1]]._forward_cls if ctx.target is operator.getitem else None
            if cls is None or not (cls.__module__ or "").startswith("lazy_mlir."):
                return f"it calls the backward of {getattr(cls, '__qualname__', cls)}"
    return None


def _accumulate(old, new):
    """Two gradients of one tensor summed as autograd's engine sums them
    (``InputBuffer::add``): an undefined one (``None``) adds nothing."""
    if old is None or new is None:
        return new if old is None else old
    return torch.add(old, new)


def _op_by_op(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` as it runs op by op: its gradient sums take an undefined
    gradient as eager's engine does, and a write through a mask has the
    formula without a data-dependent shape, as in one node.

    Compiled autograd traces a custom ``autograd.Function``'s backward as an
    opaque call and takes each gradient it returns for an input that needs
    one as a tensor; its ``torch.add`` of two gradients then dies on a
    ``None`` one (PhiMoE's router ``PhimoeMultiplier`` returns ``None`` for
    its multiplier, which also feeds the loss). A backward that runs op by op
    (SEW-D's: its ``XDropout`` is a user's ``autograd.Function``) with
    autograd's ``grad[mask]`` ran that ``index`` eagerly every step."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and (
        n.target is torch.add or masked_backward.replaces(n.target))]
    if not calls:
        return gm
    graph = fx.Graph()
    env: dict = {}
    for node in gm.graph.nodes:
        env[node] = graph.node_copy(node, lambda n: env[n])
        if node.op == "call_function" and node.target is torch.add:
            env[node].target = _accumulate
        elif node.op == "call_function" and masked_backward.replaces(node.target):
            env[node].target = masked_backward.masked(node.target)
    return fx.GraphModule(gm, graph)


def _function_contexts(gm: fx.GraphModule) -> list[int]:
    """The ``hooks`` indices of the custom ``autograd.Function`` contexts whose
    backward ``gm`` calls. A template bakes in their non-tensor attributes
    (``lazy/attention.py``'s ``is_causal`` and ``scale``), which compiled
    autograd's cache does not tell apart: their ``_compiled_autograd_key``
    joins the template's key."""
    return [node.args[0].args[1] for node in gm.graph.nodes
            if node.op == "call_function" and node.target is _external.call_backward
            and node.args[0].target is operator.getitem]


def _refusal(gm: fx.GraphModule) -> str | None:
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target not in _ALLOWED and not _is_formula(
                node.target):
            return f"it calls {getattr(node.target, '__name__', node.target)} (a hook?)"
        if node.op in ("call_module", "call_method"):
            return f"it has a {node.op} node"
    return None


def _gradients_graph(gm: fx.GraphModule):
    """``gm`` with its ``call_accumulate_grad(param, _, grad, _)`` calls
    removed and their gradients returned instead; and, for each, the index
    of its parameter in ``inputs``."""
    graph = fx.Graph()
    env: dict = {}
    params, grads = [], []
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _FINAL_CALLBACKS:
            continue
        if node.op == "call_function" and node.target is _external.call_accumulate_grad:
            variable = node.args[0]
            if node.users:
                raise NotImplementedError("lazy-mlir: a gradient accumulation's result is used")
            params.append(_input_index(variable))
            grads.append(env[node.args[2]])
            continue
        if node.op == "output":
            graph.output(tuple(grads))
            continue
        env[node] = graph.node_copy(node, lambda n: env[n])
        if node.op == "call_function" and masked_backward.replaces(node.target):
            env[node].target = masked_backward.masked(node.target)  # (no data-dependent shape)
    return fx.GraphModule(gm, graph), params


def _input_index(node: fx.Node) -> int:
    """``i`` for a node ``inputs[i]``."""
    if node.op == "call_function" and node.target is operator.getitem and \
            node.args[0].op == "placeholder" and node.args[0].name == "inputs":
        return node.args[1]
    raise NotImplementedError(f"lazy-mlir: a gradient accumulated into {node} (not an input)")


_tensor._backward = backward  # the hook LazyTensor.backward calls (tensor.py)
