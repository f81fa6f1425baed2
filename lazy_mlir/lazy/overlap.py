"""Writes whose inputs share memory with the tensor they write.

Eager PyTorch refuses an in-place or ``out=`` op (and ``copy_``) where an
input partly overlaps the written tensor (``x.sub_(x[-1])``,
``x[1:].copy_(x[:-1])``: "unsupported operation: some elements of the input
tensor and the written-to tensor refer to a single memory location"). Where
its overlap test gives up (non-contiguous layouts, ``x.mul_(x.t()[0])``) it
computes in memory order, reading elements it already wrote. The lazy device
records the functional op, which reads every input before writing: the same
value only when no element read is also written (or the input is laid out
exactly as the output). So: eager's refusal is raised (the op run on CPU
stand-ins sharing one storage as the lazy tensors do), and a write eager
would compute in memory order raises NotImplementedError rather than give
another value. Only calls with an input on the written tensor's storage pay
more than a loop over their arguments.
"""
from __future__ import annotations

import functools

import torch

from .tensor import LazyTensor

_MAX_BYTES = 1 << 26  # larger storages are not checked (the stand-in would be that large)


@functools.lru_cache(maxsize=None)
def _written(func) -> tuple:
    """Positions and keyword names of the arguments ``func`` writes."""
    return tuple((k, a.name) for k, a in enumerate(func._schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def _tensors(args, kwargs):
    for a in (*args, *kwargs.values()):
        if type(a) is LazyTensor:
            yield a
        elif isinstance(a, (list, tuple)):
            yield from (x for x in a if type(x) is LazyTensor)


def check(func, args, kwargs) -> None:
    """Raise where eager refuses ``func``'s write, or would compute it in
    memory order over elements it reads (see the module docstring)."""
    written = []
    for k, name in _written(func):
        w = args[k] if k < len(args) else kwargs.get(name)
        if type(w) is LazyTensor:
            written.append(w)
    if not written:
        return
    storages = [w._storage for w in written]
    others = [a for a in _tensors(args, kwargs)
              if any(a._storage is s for s in storages) and all(a is not w for w in written)]
    if not others:
        return
    nbytes = max(_extent(t) for t in written + others)
    if nbytes > _MAX_BYTES:
        return
    _eager_refusal(func, args, kwargs, nbytes)
    for w in written:
        for a in others:
            if a._storage is w._storage and _same(a) != _same(w) and _touch(a, w, nbytes) \
                    and not (func is _COPY and _rewrites_what_it_reads(a, w, nbytes)):
                raise NotImplementedError(
                    f"lazy-mlir: {func} reads elements of the tensor it writes through "
                    f"another view of them (a {_layout(a)} read, a {_layout(w)} write): eager "
                    "PyTorch computes this in memory order, reading elements it already "
                    "wrote, which a graph does not; clone() the input first")


_COPY = torch.ops.aten.copy_.default


def _rewrites_what_it_reads(src, dst, nbytes: int) -> bool:
    """Whether ``dst.copy_(src)`` writes every element ``src`` reads with the
    value already there (``v.copy_(v[2:3])`` broadcast over ``v``: row 2 gets
    row 2; fuzzer seed 801048). Then no element read changes, in any order,
    and the graph's value is eager's."""
    if src.dtype != dst.dtype or src.element_size() != dst.element_size():
        return False
    def elements(t):
        return torch.arange(nbytes // t.element_size()).as_strided(
            t.shape, t.stride(), t.storage_offset())
    try:
        from_ = torch.broadcast_to(elements(src), dst.shape)
    except RuntimeError:
        return False
    to = elements(dst)
    read = torch.zeros(nbytes // dst.element_size(), dtype=torch.bool)
    read[from_.reshape(-1)] = True
    return not bool(read[to[to != from_]].any())


def _same(t) -> tuple:
    """What makes two views read and write the same bytes element for
    element: a read of ``bool`` through its ``uint8`` view (``x.view(torch.uint8)
    .copy_(x)``, fuzzer seed 500133) is one, as in eager."""
    return (t.element_size(), tuple(t.shape), t.stride(), t.storage_offset())


def _layout(t) -> tuple:
    return (t.dtype, tuple(t.shape), t.stride(), t.storage_offset())


def _extent(t) -> int:
    """Bytes of storage ``t`` reaches."""
    if t.numel() == 0:
        return 0
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return (last + 1) * t.element_size()


def _stand_in(t, storage):
    """A CPU tensor laid out as ``t`` on ``storage`` (bytes)."""
    return torch.empty(0, dtype=t.dtype).set_(storage, t.storage_offset(), t.shape, t.stride())


def _eager_refusal(func, args, kwargs, nbytes: int) -> None:
    """Run ``func`` on zeros laid out as its arguments (one storage for the
    tensors that share one): raise eager's overlap error if it gives one."""
    stores = {}

    def stand_in(a):
        if type(a) is LazyTensor:
            s = stores.setdefault(id(a._storage), torch.UntypedStorage(max(nbytes, 1)))
            return _stand_in(a, s)
        if isinstance(a, (list, tuple)):
            return type(a)(stand_in(x) for x in a)
        if isinstance(a, torch.device) and a.type == "lazy":
            return torch.device("cpu")
        return a
    cargs = [stand_in(a) for a in args]
    ckw = {k: stand_in(v) for k, v in kwargs.items()}
    for s in stores.values():
        s.fill_(0)  # (zeros: valid indices, no division by zero)
    try:
        with torch.random.fork_rng(devices=[]):
            func(*cargs, **ckw)
    except RuntimeError as e:
        if str(e).startswith("unsupported operation"):
            raise RuntimeError(str(e)) from None
    except Exception:  # (any other error of the stand-in is not eager's answer)
        pass


def _touch(a, w, nbytes: int) -> bool:
    """Whether a byte ``a`` reads is a byte ``w`` writes."""
    def mask(t):
        m = torch.zeros(nbytes, dtype=torch.bool)
        if t.numel():
            s = t.element_size()
            elems = torch.arange(nbytes // s).as_strided(t.shape, t.stride(), t.storage_offset())
            idx = (elems.reshape(-1, 1) * s + torch.arange(s)).reshape(-1)
            m[idx] = True
        return m
    return bool((mask(a) & mask(w)).any())


# In-place index writes whose dtype checks live in eager's CPU kernels, not
# in their meta kernels (which shape inference runs): ``x.index_put_(i, v)``
# with ``v`` of another dtype raised nowhere on the lazy device, and wrote a
# converted value. Their source argument, by name.
_SOURCE_DTYPE = {"index_put_": "values", "_index_put_impl_": "values", "index_add_": "source",
                 "index_copy_": "source", "index_reduce_": "source", "put_": "source"}


def check_source_dtype(func, args, kwargs) -> None:
    """Raise eager's error for an in-place index write of a source whose
    dtype is not the destination's (run on CPU zeros of the arguments'
    shapes: the checks are eager's own)."""
    name = _SOURCE_DTYPE.get(func._schema.name.split("::")[-1])
    if name is None:
        return
    names = [a.name for a in func._schema.arguments]
    k = names.index(name)
    src = args[k] if k < len(args) else kwargs.get(name)
    if not isinstance(src, torch.Tensor) or src.dtype == args[0].dtype:
        return

    def zeros(a):
        if isinstance(a, torch.Tensor):
            return torch.zeros(a.shape, dtype=a.dtype)
        if isinstance(a, (list, tuple)):
            return type(a)(zeros(x) for x in a)
        return a
    try:
        func(*[zeros(a) for a in args], **{n: zeros(v) for n, v in kwargs.items()})
    except RuntimeError as e:
        raise RuntimeError(str(e)) from None
