"""Saving and loading lazy tensors: ``torch.save``, ``lm.save`` and a
streaming ``save`` / ``load`` that holds one tensor's host copy at a time.

Three ways, one rule: a lazy tensor is written as its value, a plain CPU
tensor, so every file holds ordinary tensors (no lazy-mlir class is named in
it). Pending values are computed first, all in one graph (``mark_step``:
the step's own graph when a step was left pending, so no new compile). A
view is saved as its value: the file does not say it viewed another tensor.

- ``torch.save(obj, f)``: a lazy tensor pickles as PyTorch pickles tensors
  of devices without storage (XLA, MTIA): ``_rebuild_device_tensor_from_cpu_tensor
  (cpu_value, dtype, "lazy:0", requires_grad)``, a parameter as
  ``_rebuild_parameter`` of that. Both are on ``torch.load``'s
  ``weights_only`` allow-list, so the default ``torch.load(f)`` reads the
  file, and puts the tensors back on the device they came from (``lazy:0``;
  lazy-mlir must be imported), as PyTorch does for every device;
  ``map_location="cpu"`` gives CPU tensors (and needs no lazy-mlir);
  ``map_location="lazy"`` puts the tensors saved from the lazy device on it.
  A tensor saved from the CPU has a CPU storage and PyTorch rebuilds it on
  its storage's device: ``map_location="lazy"`` leaves it on the CPU
  (``model.load_state_dict`` copies it to the lazy device; ``load`` below
  moves every tensor). The value is read in place where the device's memory
  is the host's (the cpu target), copied where it is not. PyTorch's legacy
  format (``_use_new_zipfile_serialization=False``) gets CPU tensors (see
  ``_legacy_save_under_way``).
- ``lm.save(obj, f)`` (``save_as_cpu``, the seeds' ``ltm.save``): the same
  file with every lazy tensor as a CPU tensor: it loads as CPU tensors.
- ``save(obj, path)`` / ``load(path, device=None)`` (``lm.serialization``,
  as torch_xla's ``xser``): ``path`` becomes a directory holding each tensor
  in a file of its own (``tensor_<n>.pt``, a plain ``torch.save`` of a CPU
  tensor) and ``index.pt``, the object pickled with a reference for each
  tensor. Each tensor is read from the device, written and dropped before
  the next is read: the host holds one tensor's copy at a time, where
  ``torch.save`` holds every tensor's until the file is written.

Tensors that appear twice (the same tensor object) are written once and
load as one object; distinct tensors sharing memory (a view and its base)
are written as separate values.
"""
from __future__ import annotations

import collections
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import types

import torch

from . import tensor as _tensor
from .capture import value_of
from .state import dry_run as _dry_run
from .sync import current_target, execute, mark_step, to_host
from .tensor import LazyTensor
from ..runtime import run_queue

_LAZY = "lazy"
_INDEX = "index.pt"


# -- reading a lazy tensor's value without keeping it

def host_value(t: LazyTensor) -> torch.Tensor:
    """The value of ``t`` as a CPU tensor whose storage holds exactly its
    elements. Pending work is launched first, everything pending at once
    (one graph: a step left pending compiles nothing new). The result may
    share memory with the device data (read-only) and is not kept: unlike
    ``to_host``, reading every parameter leaves no host copies behind on a
    target whose device memory is not the host's."""
    if _dry_run[0] is not None:  # lm.check_coverage: a stand-in, nothing runs
        return to_host(t)
    if t._storage.value.data is None:
        mark_step()
    v = value_of(t)  # (a view's value: pending until computed)
    if v.data is None:
        execute([v])
    d = v.data
    d.wait()
    host = d.host
    if host is None:
        from ..runtime.session import session_for  # (IREE's runtime, as sync loads it)
        host = session_for(current_target()).to_host(d.device, d.spec)
    run_queue.raise_pending_error()
    return _compact(host)


def _compact(host: torch.Tensor) -> torch.Tensor:
    """``host``, or a copy when its storage holds more than its elements
    (``torch.save`` writes a tensor's whole storage)."""
    if host.untyped_storage().nbytes() != host.numel() * host.element_size():
        return host.clone(memory_format=torch.contiguous_format)
    return host


def _is_param(t: torch.Tensor) -> bool:
    # A lazy parameter is a LazyTensor marked ``_is_param`` (nn.Parameter of
    # a wrapper subclass keeps the subclass); a CPU one is an nn.Parameter.
    return isinstance(t, torch.nn.Parameter) or getattr(t, "_is_param", False)


class _Reduced:
    """Pickles as ``fn(*args)``: a call nested in another call's arguments
    (the class itself is not named in the file)."""

    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce_ex__(self, proto):
        return self.fn, self.args


# -- torch.save of lazy tensors

def reduce_ex(t: LazyTensor, proto: int):
    """``LazyTensor.__reduce_ex__``: the tensor as PyTorch pickles one of a
    device without storage, its value a CPU tensor (see the module doc); in
    PyTorch's legacy format, as a CPU tensor."""
    if _legacy_save_under_way():
        return _as_cpu(t)
    param = _is_param(t)
    # A tensor object of its own (``detach``): the rebuild sets its
    # ``requires_grad``, and with ``map_location="cpu"`` returns it as the
    # loaded tensor, so two lazy tensors reading one host value (a tensor and
    # its ``detach()``) must not share one; they share its storage, as in eager.
    rebuild = (torch._utils._rebuild_device_tensor_from_cpu_tensor,
               (host_value(t).detach(), t.dtype, str(t.device), t.requires_grad and not param))
    if param:
        return (torch._utils._rebuild_parameter,
                (_Reduced(*rebuild), t.requires_grad, collections.OrderedDict()))
    return rebuild


def _legacy_save_under_way() -> bool:
    """Whether ``torch.save`` writes its legacy format
    (``_use_new_zipfile_serialization=False``). Its loader fills each
    storage only after the whole object is unpickled, so a rebuild that
    moves a tensor to the lazy device would copy an unfilled storage (and
    load garbage, silently): such files get CPU tensors instead. The pickler
    does not say which format it writes; the caller's frame does."""
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_legacy_save" and frame.f_globals.get("__name__") == _TORCH_SAVE:
            return True
        frame = frame.f_back
    return False


_TORCH_SAVE = torch.serialization.__name__


def _keep_storage(storage, location):
    """``torch.load``'s deserializer for the location ``lazy``
    (``map_location="lazy"``): a storage cannot live on the lazy device, so
    it stays on the host; the rebuild of a tensor saved from the lazy
    device then moves the tensor there (``_get_restore_location``)."""
    if location.startswith(_LAZY):
        return storage
    return None


def _no_tag(storage):
    return None  # no storage is ever on the lazy device


_registered = [False]


def register() -> None:
    """Teach ``torch.load`` the location ``lazy`` (once per process)."""
    if not _registered[0]:
        torch.serialization.register_package(30, _no_tag, _keep_storage)
        _registered[0] = True


# -- lm.save: lazy tensors written as CPU tensors

class _HostPickler(torch.serialization.pickle.Pickler):
    """torch.save's pickler, writing each lazy tensor as a CPU tensor."""

    def reducer_override(self, obj):
        return _as_cpu(obj) if isinstance(obj, LazyTensor) else NotImplemented


def _as_cpu(t: LazyTensor):
    """How pickle writes the CPU tensor of ``t``'s value (a parameter: a CPU
    parameter)."""
    host = host_value(t).detach()  # (a new tensor object: the value may be shared)
    if _is_param(t):
        return (torch._utils._rebuild_parameter,
                (host, t.requires_grad, collections.OrderedDict()))
    host.requires_grad_(t.requires_grad)
    return host.__reduce_ex__(4)


_host_pickling = types.SimpleNamespace(__name__="lazy_mlir.host_pickling",
                                       Pickler=_HostPickler)


def save_as_cpu(obj, f, **kwargs) -> None:
    """``torch.save(obj, f)`` with every lazy tensor in ``obj`` written as a
    CPU tensor (the seeds' ``ltm.save``): the file loads as CPU tensors,
    with ``torch.load``'s default ``weights_only=True`` where ``obj`` is
    made of tensors and containers (a state dict). Pending values are
    computed first, in one graph. ``kwargs`` go to ``torch.save``."""
    mark_step()
    torch.save(obj, f, pickle_module=_host_pickling, **kwargs)


# -- streaming save / load

class _TensorWriter:
    """The pickler of ``save``'s index: each tensor is written to a file of
    its own when the pickler meets it, and pickled as a call of ``_stored``."""

    def __init__(self, directory: str):
        self.directory = directory
        self.count = 0

    def pickling(self):
        """A ``pickle_module`` for ``torch.save`` (which subclasses its Pickler)."""
        writer = self

        class Pickler(torch.serialization.pickle.Pickler):
            def reducer_override(self, obj):
                return writer.reduce(obj)

        return types.SimpleNamespace(__name__="lazy_mlir.streaming", Pickler=Pickler)

    def reduce(self, obj):
        if (type(obj) not in (torch.Tensor, torch.nn.Parameter, LazyTensor)
                or obj.layout != torch.strided or obj.is_quantized):
            return NotImplemented  # pickled whole, by torch.save's own rules
        if isinstance(obj, LazyTensor):
            host = host_value(obj).detach()
        else:
            host = _compact(obj.detach().cpu())
        n = self.count
        self.count += 1
        torch.save(host, _tensor_file(self.directory, n))
        del host  # (before the pickler meets the next tensor)
        return (_stored, (n, obj.dtype, str(obj.device), obj.requires_grad, _is_param(obj)))


def _tensor_file(directory: str, n: int) -> str:
    return os.path.join(directory, f"tensor_{n}.pt")


def save(obj, path: str) -> None:
    """Save ``obj`` (a state dict, an optimizer's, a module, any picklable
    object holding tensors) into the directory ``path``, one tensor at a
    time: each is read from its device, written to its own file and dropped
    before the next, so the host holds at most one tensor's copy (plus the
    pickled object without its tensors). Pending lazy values are computed
    first, in one graph. ``path`` is replaced only once everything is
    written (an earlier save there is kept if this one fails); a directory
    that is not one ``save`` wrote is never replaced. ``load(path)`` reads it."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isfile(os.path.join(path, _INDEX)):
        raise FileExistsError(f"lazy-mlir: {path} exists and is not a lm.serialization.save "
                              "directory; not replacing it")
    mark_step()
    parent = os.path.dirname(path)
    new = tempfile.mkdtemp(prefix=os.path.basename(path) + ".saving-", dir=parent)
    try:
        torch.save(obj, os.path.join(new, _INDEX), pickle_module=_TensorWriter(new).pickling())
    except BaseException:
        shutil.rmtree(new, ignore_errors=True)
        raise
    old = None
    if os.path.exists(path):
        old = tempfile.mkdtemp(prefix=os.path.basename(path) + ".old-", dir=parent)
        os.replace(path, os.path.join(old, "saved"))
    os.replace(new, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


_loading = threading.local()  # .directory, .device of the load under way


def _stored(n: int, dtype: torch.dtype, device: str, requires_grad: bool, is_param: bool):
    """A tensor written by ``save``: read from its file, moved to the load's
    device (or the one it was saved from)."""
    directory = getattr(_loading, "directory", None)
    if directory is None:
        raise RuntimeError("lazy-mlir: this file is the index of lm.serialization.save; "
                           "read it with lm.serialization.load(<its directory>)")
    host = torch.load(_tensor_file(directory, n), map_location="cpu", weights_only=True)
    target = _loading.device if _loading.device is not None else device
    t = host.to(dtype=dtype, device=target)
    del host
    if is_param:
        return torch.nn.Parameter(t, requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def load(path: str, device=None, weights_only: bool = True):
    """The object ``save`` wrote into the directory ``path``, each tensor
    read from its file and moved to ``device`` before the next is read
    (None: the device it was saved from; ``"lazy"`` needs lazy-mlir's
    device, which importing lazy_mlir gives). ``weights_only``: the index
    is read by ``torch.load``'s restricted unpickler (containers, tensors,
    numbers; an object of another class, a whole module, needs False)."""
    index = os.path.join(path, _INDEX)
    if not os.path.isfile(index):
        raise FileNotFoundError(f"lazy-mlir: {path} holds no {_INDEX}: not written by "
                                "lm.serialization.save")
    if getattr(_loading, "directory", None) is not None:
        raise RuntimeError("lazy-mlir: lm.serialization.load inside another load")
    _loading.directory = path
    _loading.device = None if device is None else torch.device(device)
    try:
        allow = (torch.serialization.safe_globals([_stored]) if weights_only
                 else contextlib.nullcontext())
        with allow:
            return torch.load(index, map_location="cpu", weights_only=weights_only)
    finally:
        _loading.directory = _loading.device = None


_tensor._reduce = reduce_ex  # the hook LazyTensor.__reduce_ex__ calls (tensor.py)
