"""One aot_autograd graph (forward, backward or inference) compiled by lazy-mlir.

``compile_aot_graph(gm, example_inputs, target=..., config=...)`` is the
``fw_compiler``/``bw_compiler`` of the Dynamo backend (``dynamo.py``). It
returns a boxed callable (``_boxed_call``: it takes the argument list and
clears it).

- **Key**: the graph's code, its inputs' shapes and dtypes, its non-tensor
  inputs' values and the bytes of its constant tensors, hashed with sha256.
- **Compile**: through the compile service, as the lazy device's graphs
  (``compile_service.lookup.executable_for`` on an ``AotProgram``): the
  same memory and persistent caches (a second process with the same model
  loads the modules and compiles nothing), compile workers, loading and
  ``Executable`` kinds. The graph is traced once more with fake tensors into a
  module of tensors only (non-tensor inputs folded in as constants, ``None``
  and non-tensor results kept aside), lowered for the target and compiled.
- **Background compiles** (``LAZY_MLIR_COMPILE=background``, the default):
  until its module is ready the aot graph runs eagerly on the CPU, eager
  PyTorch's results, counted as ``EagerWhileCompiling``, as on the lazy device.
- **Failure**: a graph that fails to lower, compile or load runs eagerly (the
  aot graph itself, on the CPU), counted per call as ``DynamoEagerGraph`` and
  ``aten::<op>`` for the ops blamed; the error and its repro (the fx graph,
  or the MLIR of the failing pass) are logged once.
- **Symbolic sizes** (``dynamic=True``, Dynamo's automatic dynamic shapes):
  the graph is specialized to each call's sizes, one module per signature.
- **Transfers**: on the cpu target inputs are imported without copies and
  results read through DLPack (``runtime.session``); a result that would
  share memory with an input is copied, so callers may write to it.
"""
from __future__ import annotations

import bisect
import hashlib
import logging
import operator
import weakref

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import unset_fake_temporarily

from .. import metrics
from .aot_constants import fold_constant_divisions
from .aot_empty import fold_empty
from ..dialects.as_strided_base import fresh_dtype_bases
from ..compile_service.executable import COMPILING, FAILED, LOADED, EagerExecutable
from ..compile_service.lookup import executable_for
from ..config import PipelineConfig
from ..targets import Target

log = logging.getLogger("lazy_mlir")


class _Spec:
    """What ``Session.to_host`` needs of a result: its shape and dtype."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype

    def signature(self) -> str:
        return f"{str(self.dtype)[6:]}{list(self.shape)}"


def _is_symbolic(v) -> bool:
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(v, torch.Tensor):
        return any(isinstance(s, torch.SymInt) for s in (*v.shape, *v.stride()))
    return False


def compile_aot_graph(gm: fx.GraphModule, example_inputs, *, target: Target,
                      config: PipelineConfig):
    """The boxed callable that runs ``gm`` compiled for ``target``. Its
    modules run in this process: they may call PyTorch's kernels as the lazy
    device's do (``host_calls.session_config``), and share their config."""
    from ..host_calls.runtime.switches import session_config
    from .aot_writes import RunsEagerly, WritesBack, defer_input_writes
    config = session_config(target, config)
    if _computed_bytes_as_bool(gm):
        return RunsEagerly(gm)
    deferred = defer_input_writes(gm)  # (its copy_ into inputs: done after each call)
    if deferred is None:
        return RunsEagerly(gm)
    gm, targets = deferred
    metrics.counter_inc("DynamoInputWrites", len(targets))  # (per graph compiled, not per call)
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    if any(_is_symbolic(v) for v in vals):
        runner = _Specializing(gm, target, config)
    else:
        # (aot_autograd calls its compiler inside its fake mode; a compile
        # must not run there: torch-mlir's as_strided rewrite makes fake
        # values of the graph's own mode, "Mixing fake modes")
        with unset_fake_temporarily():
            runner = _Specialized(gm, [_describe_input(v) for v in vals], target, config)
    runner._boxed_call = True
    return WritesBack(runner, targets) if targets else runner


def _computed_bytes_as_bool(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` views computed bytes as bool (``b.view(torch.uint8)``
    written, then its bool view read): a graph's bools are ``i1``, so a byte
    other than 0 or 1 would come back 1 (fuzzer seed 800152, silently; the
    lazy device raises at the write). Such a graph runs eagerly, eager's
    bytes kept. Views of an input's bytes (``x.narrow(0, 0, 3).view(torch.bool)``)
    are read as the input itself is: compiled (fuzzer seeds 900027, 900291)."""
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.view.dtype and n.args[1] is torch.bool:
            src = n.args[0]
            while isinstance(src, fx.Node) and src.op == "call_function" and src.args and (
                    getattr(src.target, "is_view", False) or src.target is operator.getitem):
                src = src.args[0]  # (up the views, unbind's and split's too, to the tensor)
            val = src.meta.get("val") if isinstance(src, fx.Node) else None
            if src.op != "placeholder" and getattr(val, "dtype", torch.bool) is not torch.bool:
                log.warning("lazy-mlir (torch.compile backend): a graph views computed bytes "
                            "as bool (a write through a uint8 view of a bool tensor); it runs "
                            "eagerly, keeping eager's bytes")
                return True
    return False


def _describe_input(v):
    """('t', shape, dtype) for a tensor input, ('c', value) for another."""
    if isinstance(v, torch.Tensor):
        return ("t", tuple(int(s) for s in v.shape), v.dtype)
    return ("c", v)


class _Specializing:
    """A graph with symbolic sizes: one ``_Specialized`` per call signature."""

    def __init__(self, gm, target, config):
        self.gm, self.target, self.config = gm, target, config
        self.by_signature: dict[tuple, _Specialized] = {}

    def __call__(self, args):
        inputs = [_describe_input(a) for a in args]
        sig = tuple((d[0], d[1], str(d[2])) if d[0] == "t" else d for d in inputs)
        runner = self.by_signature.get(sig)
        if runner is None:
            metrics.counter_inc("DynamoSpecialize")
            runner = self.by_signature[sig] = _Specialized(self.gm, inputs, self.target,
                                                           self.config)
        return runner(args)


class _Specialized:
    """``gm`` for one input signature: its ``Executable`` from the compile
    service (loaded, compiling or failed: the last two run ``gm`` eagerly)."""

    def __init__(self, gm, inputs, target: Target, config: PipelineConfig):
        self.gm = gm
        self.inputs = inputs
        self.tensor_pos = [i for i, d in enumerate(inputs) if d[0] == "t"]
        self.target = target
        self.config = config
        self.key = graph_key(gm, inputs)
        self.program = AotProgram(self)
        self.entry = executable_for(self.program, target, config)
        self.session = None
        self.outputs = None  # the results' layout, known once the module is loaded
        # Per tensor input: (weakref to the tensor, its data_ptr, the device
        # array imported from its memory). The parameters come back as the same
        # tensors each step; their memory is imported, not copied, so the
        # array made at the last call still reads their current contents.
        self._imports: list = [None] * len(self.tensor_pos)
        self._returned: dict = {}  # result -> the argument it is, returned unchanged
        self._viewing: frozenset | None = None  # (``_views_of_arguments``, after a call)
        self._plan: list | None = None  # (``_read_plan``: how each result is read, after a call)

    def __call__(self, args):
        if self.outputs is None:
            if self.entry.state == COMPILING:  # (each lookup settles finished compiles)
                self.entry = executable_for(self.program, self.target, self.config)
            if self.entry.state != LOADED:
                return self._run_eagerly(args)
            self._loaded()
        hosts = [args[i] for i in self.tensor_pos]
        args.clear()
        arrays = []
        for j, (host, seen) in enumerate(zip(hosts, self._imports)):
            if seen is not None and seen[0]() is host and seen[1] == host.data_ptr():
                arrays.append(seen[2])  # (``_to_device``'s first case, inline: the parameters)
            else:
                arrays.append(self._to_device(j, host))
        outs = self.entry(*arrays)
        plan = self._plan
        if plan is None:
            results = self._read(hosts, arrays, outs)
            self._plan = _read_plan(self, outs)
            return results
        return _read_by_plan(plan, self.session, hosts, outs)

    def _read(self, hosts, arrays, outs) -> list:
        """The results of a call, each through ``Session.to_host`` (the first
        call, and every call of a module whose views are unknown)."""
        outs = iter(outs)
        session = self.session
        returned = self._returned
        viewing = self._views_of_arguments()
        ranges = _imported_ranges(arrays) if viewing is None else None
        results = []
        k = -1
        for kind, value in self.outputs:
            if kind != "t":
                results.append(value)
                continue
            array, k = next(outs), k + 1
            if k in returned:  # the caller's own tensor (as inductor returns it) where
                # the graph returns the argument itself; an argument's value computed
                # (a copy IREE folded away) is a new tensor: aot_autograd writes the
                # argument's mutations into it after the call (x.clone() then
                # x.masked_fill_(...): the clone changed too, silently; seed 400186)
                j = returned[k]
                results.append(_as_returned(hosts[j], j in self._direct, value.dtype))
                continue
            out = session.to_host(array, value)
            if (k in viewing) if ranges is None else _inside(ranges, out):
                out = out.clone()  # an argument's memory: the caller may outlive it
            else:  # (fed to a later graph, a forward's activation to its backward)
                _mark_made(out, array)
            results.append(out)
        return results

    def _loaded(self) -> None:
        """Ready the compiled calls: the session, the passthrough results,
        the results' layout."""
        from ..runtime.session import session_for
        self.session = session_for(self.target)
        self._returned = dict(self.entry.passthrough)
        self._direct = _returned_as_they_are(self.gm, self.tensor_pos)
        self.outputs = self.program.layout

    def _run_eagerly(self, args):
        """``gm`` on the host: while its module compiles (counted by the
        service as ``EagerWhileCompiling``), or for good when it failed
        (``DynamoEagerGraph``, and ``aten::<op>`` for the ops blamed)."""
        if self.entry.state == FAILED:
            metrics.counter_inc("DynamoEagerGraph")
            for op in self.entry.ops:
                metrics.counter_inc(f"aten::{op}")
        out = self.gm(*args)
        args.clear()
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def _views_of_arguments(self) -> frozenset | None:
        """The results that lie in the memory of an argument imported from the
        host, as the module found at its first call (``LoadedModule.views``);
        None where it could not tell (then each call checks address ranges)."""
        if self._viewing is None:
            views = self.entry.views
            if not self.session.zero_copy:
                self._viewing = frozenset()
            elif views is not None:
                self._viewing = frozenset(r for r, _ in views)
        return self._viewing

    def _to_device(self, j: int, host: torch.Tensor):
        """The device array of input ``j``: the one imported at an earlier
        call when ``host`` is the same tensor over the same memory; the array
        ``host`` was read from when it is a result of a graph, unwritten since
        (a forward's activations, read by its backward, are not imported again;
        nor the gradients autograd hands the optimizer's graph: ``_mark_made``)."""
        seen = self._imports[j]
        if seen is not None and seen[0]() is host and seen[1] == host.data_ptr():
            return seen[2]
        made = getattr(host.untyped_storage(), "_lazy_mlir_array", None)
        if made is not None and made[1] == host._version and made[2] == host.data_ptr() \
                and made[3] == host.shape and made[4] == host.dtype and host.is_contiguous():
            self._imports[j] = None  # (an earlier import would keep memory ``host`` left)
            return made[0]
        array = self.session.to_device(host)
        imported = getattr(array, "_lazy_mlir_host", None)
        if imported is not None and imported[2] == host.data_ptr():
            self._imports[j] = (weakref.ref(host), host.data_ptr(), array)
        else:  # copied (not contiguous, converted): a copy goes stale
            self._imports[j] = None
        return array


def graph_key(gm: fx.GraphModule, inputs) -> str:
    """A sha256 of what the module compiled from ``gm`` depends on: its code,
    its inputs' shapes and dtypes (non-tensor inputs by value) and the
    contents of its constant tensors."""
    h = hashlib.sha256(b"dynamo-aot:2\n")
    h.update(gm.code.encode())
    h.update(repr([(d[0], d[1], str(d[2])) if d[0] == "t" else (d[0], repr(d[1]))
                   for d in inputs]).encode())
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():  # aot_autograd calls its compilers under a fake mode
        for node in gm.graph.nodes:
            if node.op == "get_attr":
                value = getattr(gm, node.target)
                if isinstance(value, torch.Tensor):
                    t = value.detach().contiguous().cpu()
                    h.update(f"{node.target}:{t.dtype}{list(t.shape)}".encode())
                    # (1-d first: a 0-d tensor of wider elements has no uint8 view)
                    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _returned_as_they_are(gm, tensor_pos) -> set:
    """The tensor arguments (their indices among the tensor arguments) that
    ``gm`` returns as they are: an output that is the placeholder itself."""
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    flat = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    direct = set()
    for a in flat:
        if isinstance(a, torch.fx.Node) and a.op == "placeholder":
            p = places.index(a)
            if p in tensor_pos:
                direct.add(tensor_pos.index(p))
    return direct


def _mark_made(out: torch.Tensor, array) -> None:
    """Note on ``out``'s storage that ``out`` holds ``array``'s contents, for
    ``_to_device`` to hand the array back to a later graph. On the storage,
    not the tensor: autograd stores a gradient as ``grad.detach()`` (a new
    tensor over the same storage, sharing its version counter), and the
    optimizer's graph is handed that. Checked there: the same address,
    shape, dtype and layout, and the version the tensor had when read."""
    out.untyped_storage()._lazy_mlir_array = (array, out._version, out.data_ptr(),
                                              out.shape, out.dtype)


_CONST, _MINE, _RETURNED, _VIEW, _READ = range(5)


def _read_plan(spec: "_Specialized", outs) -> list | None:
    """How each result of ``spec``'s module is read, made after its first
    call (``outs``: that call's arrays), or None where the results must be
    checked at every call (their views of the arguments unknown). Per
    result: (_CONST, value), (_RETURNED, argument, as it is, dtype), (_VIEW, k,
    spec) (copied out of an argument's memory), (_READ, k, spec) (general
    ``to_host``) or (_MINE, k, nbytes): read in place through DLPack, as
    ``Session.to_host`` would on the cpu target, without its checks (the
    first call made them: the memory is the host's, DLPack reads the
    element type, the shape and dtype are the result's)."""
    viewing = spec._views_of_arguments()
    session = spec.session
    if viewing is None:
        return None
    plan = []
    k = -1
    for kind, value in spec.outputs:
        if kind != "t":
            plan.append((_CONST, value))
            continue
        k += 1
        if k in spec._returned:
            j = spec._returned[k]
            plan.append((_RETURNED, j, j in spec._direct, value.dtype))
        elif k in viewing:
            plan.append((_VIEW, k, value))
        elif session.zero_copy and _reads_in_place(session, outs[k], value):
            plan.append((_MINE, k, outs[k]._buffer_view.byte_length))
        else:
            plan.append((_READ, k, value))
    return plan


def _reads_in_place(session, array, spec) -> bool:
    """Whether ``session.to_host(array, spec)`` is DLPack's tensor as it is."""
    view = array._buffer_view
    if not session.owns(array) or not (view.get_buffer().memory_type()
                                       & int(session.rt.MemoryType.HOST_VISIBLE)):
        return False
    try:
        raw = torch.from_dlpack(session.device.create_dlpack_capsule(view, 1, 0))
    except Exception:
        return False
    return raw.dtype == spec.dtype and tuple(raw.shape) == spec.shape


def _as_returned(host: torch.Tensor, direct: bool, dtype: torch.dtype) -> torch.Tensor:
    """A result the module answers with argument ``host``: itself where
    ``direct``, else a copy; of the result's ``dtype`` where it differs
    (``uint8_x.to(torch.int8)``: ui8 and si8 are one i8 in the module, the
    conversion folds away and ``main`` returns its argument, which came back
    as the uint8 input, silently; issue 54)."""
    if host.dtype != dtype:
        return host.view(dtype).clone()
    return host if direct else host.clone()


def _read_by_plan(plan, session, hosts, outs) -> list:
    """The results of a call, read as ``_read_plan`` says."""
    capsule = session.device.create_dlpack_capsule
    from_dlpack = torch._C._from_dlpack
    results = []
    nbytes = 0
    for step in plan:
        kind = step[0]
        if kind == _MINE:
            array = outs[step[1]]
            out = from_dlpack(capsule(array._buffer_view, 1, 0))
            out.untyped_storage()._lazy_mlir_array = (array, 0, out.data_ptr(),
                                                      out.shape, out.dtype)
            nbytes += step[2]
        elif kind == _CONST:
            results.append(step[1])
            continue
        elif kind == _RETURNED:
            out = _as_returned(hosts[step[1]], step[2], step[3])
        elif kind == _VIEW:
            out = session.to_host(outs[step[1]], step[2]).clone()
        else:
            array = outs[step[1]]
            out = session.to_host(array, step[2])
            _mark_made(out, array)
        results.append(out)
    if nbytes:
        metrics.counter_inc("TransferFromDevice", nbytes)
        metrics.counter_inc("ZeroCopyFromDevice", nbytes)
    return results


def _imported_ranges(arrays):
    """(starts, ends) of the host memory the device arrays were imported
    from (``Session._import``): a result read from inside one would share
    memory that the array, not the result, keeps alive."""
    ranges = []
    for a in arrays:
        host = getattr(a, "_lazy_mlir_host", None)
        if host is not None and host[1].nbytes:
            start = host[2]
            ranges.append((start, start + host[1].nbytes))
    ranges.sort()
    return [r[0] for r in ranges], [r[1] for r in ranges]


def _inside(ranges, out: torch.Tensor) -> bool:
    starts, ends = ranges
    i = bisect.bisect_right(starts, out.data_ptr()) - 1
    return i >= 0 and out.data_ptr() < ends[i]


# -- the program the compile service compiles ---------------------------------

class AotProgram:
    """What the compile service (``compile_service.lookup``) reads of an aot
    graph: its key, its ops (blamed when it fails), the tensor-only fx module
    it compiles (``fx_module``, traced on first use: a cached module needs
    none) and, for a dump, its inputs and outputs. A failure runs the graph
    eagerly, logged once with a repro; no op is denied to the lazy device."""

    on_calling_thread = False

    def __init__(self, spec: _Specialized):
        self.spec = spec
        self.key = "dynamo:" + spec.key
        self.nodes = [_NodeView(n.target) for n in spec.gm.graph.nodes
                      if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]
        self.inputs = [_DataView(_Spec(d[1], d[2])) for d in spec.inputs if d[0] == "t"]
        self._traced = None

    def _trace(self):
        if self._traced is None:
            self._traced = tensor_module(self.spec.gm, self.spec.inputs)
        return self._traced

    @property
    def fx_module(self) -> fx.GraphModule:
        return self._trace()[0]

    @property
    def layout(self):
        """('t', spec) per tensor result, ('c', value) for anything else."""
        if self._traced is None:
            layout = _layout_from_meta(self.spec.gm)
            if layout is not None:
                return layout
        return self._trace()[1]

    @property
    def outputs(self):
        return [_DataView(v) for k, v in self.layout if k == "t"]

    @property
    def in_worker(self) -> bool:
        """A worker rebuilds the graph from its rows, not the module's
        attributes: a graph holding constants compiles in this process."""
        return not any(n.op == "get_attr" for n in self.fx_module.graph.nodes)

    def fallback(self, error: Exception):
        """The graph runs eagerly: say why once, with a repro."""
        from ..dialects.runner import PipelineError
        spec = self.spec
        repro = getattr(error, "repro", None) or _write_fx_repro(spec.gm, error)
        log.warning("lazy-mlir (torch.compile backend): graph %s failed to compile for %s: "
                    "%s\n  repro: %s\n  it runs eagerly on the CPU", spec.key[:12],
                    spec.target.name, _first_line(error), repro)
        if not isinstance(error, PipelineError):
            log.debug("lazy-mlir: compile error", exc_info=error)
        blamed = list(getattr(error, "unlowered", ()) or ())
        ops = sorted({o.split(".")[0] for o in blamed}) or _op_names(spec.gm)
        return EagerExecutable(spec.gm, ops)


def _layout_from_meta(gm: fx.GraphModule):
    """The results' layout read from the output node's fake values, or None
    where one is not a tensor of concrete sizes or a plain constant."""
    (outs,) = gm.graph.output_node().args
    layout = []
    for o in (outs if isinstance(outs, (tuple, list)) else [outs]):
        if not isinstance(o, fx.Node):
            layout.append(("c", o))
            continue
        val = o.meta.get("val")
        if not isinstance(val, torch.Tensor) or _is_symbolic(val):
            return None
        layout.append(("t", _Spec(val.shape, val.dtype)))
    return layout


def tensor_module(gm: fx.GraphModule, inputs):
    """``gm`` traced again (fake tensors) as a module of its tensor inputs
    only, returning its tensor results only; and the layout of ``gm``'s
    results: ('t', spec) for a tensor, ('c', value) for anything else."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    layout: list = []

    def run(*tensors):
        it = iter(tensors)
        args = [next(it) if d[0] == "t" else d[1] for d in inputs]
        outs = gm(*args)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        layout[:] = [("t", _Spec(o.shape, o.dtype)) if isinstance(o, torch.Tensor)
                     else ("c", _concrete(o)) for o in outs]
        return tuple(o for o in outs if isinstance(o, torch.Tensor))

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fakes = [torch.empty(d[1], dtype=d[2]) for d in inputs if d[0] == "t"]
        module = make_fx(run, decomposition_table=_inductor_prims())(*fakes)
    # Here, where views still share their fake storage (a compile worker gets
    # specs only): an as_strided of a split/unbind output reads the tensor split
    # (an unbind's 0-d output read as itself: seed 900375, silently).
    fresh_dtype_bases(module)
    module = fold_empty(module)
    fold_constant_divisions(module)  # (torch-mlir's folders get them wrong)
    return module, layout


def _inductor_prims() -> dict:
    """Decompositions of the ops inductor defines for itself
    (``torch/_inductor/inductor_prims.py``) that Dynamo's graphs of
    torch.optim updates carry (``prims.fma`` in lerp) and torch-mlir lacks.
    Not in ``ops/``'s registry: the op exists only once inductor's module
    is imported, which lazy-mlir does not do."""
    try:
        fma = torch.ops.prims.fma.default
    except AttributeError:
        return {}
    return {fma: lambda a, b, c: a * b + c}  # rounded twice, as IREE would anyway


def _concrete(v):
    if isinstance(v, torch.SymInt):
        return int(v)
    if isinstance(v, torch.SymFloat):
        return float(v)
    return v


def _op_names(gm) -> list[str]:
    return sorted({getattr(n.target, "__name__", str(n.target)).split(".")[0]
                   for n in gm.graph.nodes if n.op == "call_function"
                   and isinstance(n.target, torch._ops.OpOverload)})


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _write_fx_repro(gm: fx.GraphModule, e: Exception):
    """A repro directory for an error outside the MLIR pipelines: the graph."""
    from ..dialects.runner import write_repro
    try:
        return write_repro(gm.print_readable(print_output=False),
                           "# the aot_autograd fx graph that failed (fx.txt saved as fx.mlir)",
                           f"{type(e).__name__}: {e}", "fx")
    except OSError:
        return None


class _NodeView:
    location = None

    def __init__(self, op):
        self.op = op


class _DataView:
    def __init__(self, spec):
        self.spec = spec
