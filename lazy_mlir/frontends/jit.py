"""``lm.jit(fn).lower(*args).compile()``: the staged API.

``jit`` traces ``fn`` (tensors in, tensors out) on the lazy device, with the
same capture, graph and stage objects as ``mark_step``. ``Lowered`` gives the
IR of every stage (computed on demand for IREE's phases); ``compile`` gives a
callable ``CompiledFunction`` whose ``.artifact`` is the vmfb.

Lowering and compiling go through mark_step's path: ``pipeline.compile``'s
``lower_graph`` for the target (its rewrites: im2col/channels-last
convolutions on cpu) and ``compile_graph``, then the compile service's
loader, ``compile_service.lookup.load_executable`` (clobbered copies,
passthrough results, the eager fallback of a module IREE cannot load).
Unlike mark_step, a failed compile raises.
"""
from __future__ import annotations

import functools

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..config import PipelineConfig, current_config
from ..compile_service.executable import EagerExecutable
from ..pipeline.compile import CompiledGraph, compile_graph, lower_graph
from ..pipeline.stages import IREE_PHASES, Stage, iree_phase
from ..targets import Target, get_target


def jit(fn):
    """Wrap ``fn`` for staged compilation: ``jit(fn).lower(*example_args)``."""
    return Jitted(fn)


class Jitted:
    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def lower(self, *args, target: str | Target | None = None,
              config: PipelineConfig | None = None) -> "Lowered":
        """Trace ``fn`` on lazy copies of ``args`` and lower it to linalg for
        ``target`` (default: the current target, ``lm.set_target``)."""
        from ..lazy import bounds, early_outputs, offsets
        from ..lazy.capture import data_value, emit, value_of
        from ..graph.program import Graph
        from ..lazy.sync import current_target, execute
        from ..lazy.tensor import LazyTensor, wrap_value
        if not args or not all(isinstance(a, torch.Tensor) for a in args):
            raise TypeError("lm.jit: lower(*args) takes the example tensors fn is called with")
        lazy_args = []
        for a in args:
            if isinstance(a, LazyTensor):
                execute([value_of(a)])
                lazy_args.append(wrap_value(value_of(a)))
            else:
                lazy_args.append(wrap_value(data_value(a.detach().clone())))
        leading = [value_of(t).data for t in lazy_args]
        # (the graph runs at later calls: indices clamped, not checked, those
        # of the example inputs too (``in_graph``: host values are not checked
        # at capture, which would leave them unclamped); one graph; view
        # offsets constants, as they are on every target)
        with bounds.unchecked(), bounds.in_graph(), early_outputs.one_graph(), \
                offsets.constant_offsets():
            out = self.fn(*lazy_args)
        leaves, tree = tree_flatten(out)
        if not leaves or not all(isinstance(t, LazyTensor) for t in leaves):
            raise TypeError("lm.jit: fn must return tensors computed from its arguments")
        roots = []
        for t in leaves:
            v = value_of(t)
            roots.append(v if v.pending else emit(torch.ops.aten.clone.default, (v,), {})[0])
        graph = Graph.build(roots, leading)
        return Lowered(graph, tree, len(leading), config or current_config(),
                       any(isinstance(a, LazyTensor) for a in args),
                       _as_target(target) if target is not None else current_target())


class Lowered:
    """The lowered stages of a traced function, for ``target``."""

    def __init__(self, graph, out_tree, n_args: int, config: PipelineConfig, lazy_io: bool,
                 target: Target):
        self.graph = graph
        self.out_tree = out_tree
        self.n_args = n_args
        self.config = config
        self.lazy_io = lazy_io
        self.target = target
        self._lowered = {target.name: lower_graph(graph, target, config)}
        self._stages = self._lowered[target.name]
        self._phases: dict[tuple[str, str], Stage] = {}

    def _stages_for(self, target: Target) -> tuple[Stage, ...]:
        """The stages lowered for ``target`` (lowering depends on its name only)."""
        if target.name not in self._lowered:
            self._lowered[target.name] = lower_graph(self.graph, target, self.config)
        return self._lowered[target.name]

    @property
    def stages(self) -> tuple[str, ...]:
        """Stage names in order, from fx to IREE's vm phase."""
        return tuple(s.name for s in self._stages) + tuple("iree-" + p for p in IREE_PHASES)

    def stage(self, name: str, target: str | Target | None = None) -> Stage:
        """One stage, lowered for ``target`` (default: the one lowered for)."""
        t = self.target if target is None else _as_target(target)
        stages = self._stages_for(t)
        for s in stages:
            if s.name == name:
                return s
        if name.startswith("iree-") and name[5:] in IREE_PHASES:
            key = (name, t.cache_key)
            if key not in self._phases:
                self._phases[key] = iree_phase(stages, name[5:], t, self.config)
            return self._phases[key]
        raise ValueError(f"unknown stage {name!r}; stages: {', '.join(self.stages)}")

    def as_text(self, stage: str = "linalg", target: str | Target | None = None) -> str:
        return self.stage(stage, target).as_text()

    def compile(self, target: str | Target | None = None) -> "CompiledFunction":
        """Compile for ``target`` (default: the one lowered for; another
        target's name lowers the graph again, with its rewrites). Raises the
        ``PipelineError`` of a failed compile, or ``InPlaceHazard`` for a
        graph IREE would compute wrongly."""
        t = self.target if target is None else _as_target(target)
        result = compile_graph(self.graph, t, self.config, stages=self._stages_for(t))
        return CompiledFunction(self, result)


def _as_target(target: str | Target) -> Target:
    return target if isinstance(target, Target) else get_target(target)


class CompiledFunction:
    """A compiled traced function: call it on CPU tensors (returns CPU
    tensors) or lazy tensors (returns lazy tensors). Loaded as mark_step
    loads its modules; one IREE cannot load runs its fx module on the host."""

    def __init__(self, lowered: Lowered, compiled: CompiledGraph):
        from ..compile_service.lookup import load_executable
        from ..runtime.session import session_for
        self.lowered = lowered
        self.compiled = compiled
        self.stages = compiled.stages
        self._session = session_for(compiled.target)
        self._module = load_executable(compiled, lowered.graph, compiled.target)
        self._bound = lowered.graph.inputs[lowered.n_args:]  # constants made inside fn

    @property
    def artifact(self) -> bytes:
        return self.compiled.vmfb

    @property
    def flags(self) -> tuple[str, ...]:
        """The iree-compile flags the artifact was built with."""
        return self.compiled.flags

    def __call__(self, *args):
        from ..graph.ir import DeviceData
        from ..lazy.sync import host_of, to_host
        from ..lazy.tensor import LazyTensor, wrap_value
        from ..graph.ir import Value
        expected = [d.spec for d in self.lowered.graph.inputs[:self.lowered.n_args]]
        if len(args) != len(expected):
            raise TypeError(f"expected {len(expected)} tensors, got {len(args)}")
        lazy = any(isinstance(a, LazyTensor) for a in args)
        for a, spec in zip(args, expected):
            if tuple(a.shape) != spec.shape or a.dtype != spec.dtype:
                raise TypeError(f"expected {spec.signature()}, got "
                                f"{str(a.dtype)[6:]}{list(a.shape)}")
        hosts = [to_host(a) if isinstance(a, LazyTensor) else a for a in args]
        if isinstance(self._module, EagerExecutable):
            outs = self._module.gm(*hosts, *[host_of(d) for d in self._bound])
            results = [wrap_value(Value.of_data(DeviceData(v.spec, host=o.contiguous())))
                       if lazy else o for v, o in zip(self.lowered.graph.outputs, outs)]
            return tree_unflatten(results, self.lowered.out_tree)
        arrays = [self._session.to_device(h) for h in hosts]
        for d in self._bound:
            if d.device is None:
                host_of(d)
                d.device = self._session.to_device(d.host)
            arrays.append(d.device)
        outs = self._module(*arrays)
        results = []
        for v, o in zip(self.lowered.graph.outputs, outs):
            data = DeviceData(v.spec, device=o)
            results.append(wrap_value(Value.of_data(data)) if lazy
                           else _own(self._session.to_host(o, v.spec), o, arrays, hosts))
        return tree_unflatten(results, self.lowered.out_tree)


def _own(result: torch.Tensor, array, arrays, hosts) -> torch.Tensor:
    """``result``, copied where it is an argument's memory: a module may hand
    an input buffer back as an output (``fn`` returning its argument), and
    that memory (the caller's tensor, or its contiguous copy) is not kept
    alive by the result (was: the result read freed memory)."""
    if any(array is a for a in arrays):
        return result.clone()
    p = result.data_ptr()
    for h in hosts:
        if h.numel() and h.data_ptr() <= p < h.data_ptr() + h.untyped_storage().nbytes():
            return result.clone()
    return result
