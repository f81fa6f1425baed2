"""Collectives on lazy tensors: cut points between compiled segments.

IREE's CPU and Vulkan drivers have no collective channels, so a collective
cannot sit inside a compiled graph. Each collective here is a cut point: it
launches every pending tensor as one graph (as ``mark_step`` does, so the
step before it stays one graph), runs the real collective of
``torch.distributed`` (gloo on the CPU; the process group's own backend
otherwise) on the host data of its inputs, and binds the result as device
data. What follows is recorded as usual and runs in the next graph: a
training step with one bucketed all-reduce is two graphs, each compiled once.

On the cpu target the host data of a graph output is the IREE buffer's own
memory (DLPack, zero copy): a bucket is reduced in place there and handed
to the next graph as its input without a copy either way.

Collectives reach this module two ways: the functions below (the
``lm.distributed`` helpers call them), and PyTorch's functional collectives
(``torch.distributed._functional_collectives``, i.e. the
``torch.ops._c10d_functional`` ops) called on lazy tensors, routed here by
``dispatch`` (``kinds.kind`` says "collective").

Every collective counts ``sync::<name>`` (a host sync: ``compile_train_step``
refuses to replay a step with one and runs it plain) and ``CollectiveBytes``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten, tree_map

from .. import metrics
from .capture import assign, data_value, value_of
from .state import dry_run as _dry_run
from .sync import execute, to_host
from .tensor import LazyTensor, live_storages, wrap_value

BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket_cap_mb
_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
               "product": dist.ReduceOp.PRODUCT, "avg": "avg"}
c10d = torch.ops._c10d_functional
# The ``sync::`` counters of collectives (compile_train_step names them in its refusal).
NAMES = frozenset(["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                   "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single",
                   "all_reduce_coalesced", "all_gather_into_tensor_coalesced",
                   "reduce_scatter_tensor_coalesced"])


def _require_lazy(tensors, what: str) -> None:
    for t in tensors:
        if not isinstance(t, LazyTensor):
            raise TypeError(f"lazy-mlir: {what} takes tensors on the lazy device, got one on "
                            f"{t.device}; move it with .to('lazy')")


def _require_group(group) -> None:
    if not dist.is_initialized():
        raise RuntimeError("lazy-mlir: a collective needs torch.distributed initialized: call "
                           "torch.distributed.init_process_group('gloo') (torchrun sets "
                           "the rendezvous variables) or lm.distributed.init()")


def _cut() -> None:
    """Launch every pending tensor as one graph: the segment before the
    collective (a partial launch would leave the forward's loss pending,
    and the next graph would compute the forward again)."""
    execute([s.value for s in live_storages], everything=True)


def _count(name: str, nbytes: int) -> None:
    metrics.counter_inc("sync::" + name)
    metrics.counter_inc("CollectiveBytes", nbytes)


def buckets(tensors: list, bucket_bytes: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of ``tensors`` in buckets of one dtype and at most
    ``bucket_bytes`` (a larger tensor gets a bucket of its own), in order."""
    out, open_ = [], {}
    for i, t in enumerate(tensors):
        size = t.numel() * t.element_size()
        b = open_.get(t.dtype)
        if b is None or (b[1] + size > bucket_bytes and b[0]):
            b = open_[t.dtype] = [[], 0]
            out.append(b[0])
        b[0].append(i)
        b[1] += size
    return out


def _writable_host(flat: LazyTensor, exclusive: bool) -> torch.Tensor:
    """The host data of ``flat``, to be reduced in place. A bucket of two or
    more tensors is a ``cat``'s fresh output, read only by us: its memory is
    written in place (no copy). One of a single tensor may be that tensor's
    own buffer (the ``cat`` folds away): copied."""
    host = to_host(flat)
    if exclusive and host.is_contiguous():
        return host
    return host.clone(memory_format=torch.contiguous_format)


def _staged(host: torch.Tensor, group) -> torch.Tensor:
    """The tensor the group's backend takes: ``host`` itself for gloo; a
    copy on this rank's GPU for NCCL (the cuda target's data is read back to
    the host first; a device-to-device path would need IREE's CUDA buffers
    exported through DLPack: not done, and untested without two GPUs)."""
    if dist.get_backend(group) == "nccl":
        return host.to(torch.device("cuda", torch.cuda.current_device()))
    return host


def _finish(works, hosts, staged, name: str, group) -> None:
    """Wait for the collectives; a peer's failure becomes an error that says
    so (gloo raises when a peer's connection closes, or at the timeout)."""
    try:
        for w in works:
            w.wait()
    except RuntimeError as e:
        raise RuntimeError(
            f"lazy-mlir: {name} across {dist.get_world_size(group)} ranks failed: a peer rank "
            f"exited, or did not reach it within the process group's timeout ({e})") from e
    for h, s in zip(hosts, staged):
        if s is not h:
            h.copy_(s)


def _bucketed_in_place(tensors: list, name: str, group, launch, bucket_bytes: int,
                       finish_piece=None) -> list:
    """The bucket loop of the in-place collectives: flatten ``tensors`` into
    buckets, cut the graph, run ``launch(host)`` (an async collective) on each
    bucket's host data, all in flight at once, then write each tensor's slice
    of its bucket back (through ``finish_piece`` when given)."""
    groups = buckets(tensors, bucket_bytes)
    with torch.no_grad():
        flats = [torch.cat([tensors[i].reshape(-1) for i in b]) for b in groups]
        _cut()
        hosts = [_writable_host(f, len(b) > 1) for f, b in zip(flats, groups)]
        staged = [_staged(h, group) for h in hosts]
        works = [launch(h) for h in staged]
        _finish(works, hosts, staged, name, group)
        for b, h in zip(groups, hosts):
            _count(name, h.numel() * h.element_size())
            full = wrap_value(data_value(h))
            offset = 0
            for i in b:
                t = tensors[i]
                piece = full[offset:offset + t.numel()].view(t.shape)
                offset += t.numel()
                if finish_piece is not None:
                    piece = finish_piece(piece)
                assign(t, value_of(piece))
    return tensors


def all_reduce_(tensors: list, op: str = "sum", group=None,
                bucket_bytes: int = BUCKET_BYTES) -> list:
    """Reduce each lazy tensor across the group, in place (``op``: sum, avg,
    max, min, product). Tensors are flattened into buckets (one collective
    per bucket, all in flight at once); "avg" is a sum, then a division
    recorded on the lazy device (gloo has no AVG), which joins the next
    graph. Returns ``tensors``."""
    _require_lazy(tensors, "all_reduce_")
    _require_group(group)
    if op not in _REDUCE_OPS:
        raise ValueError(f"lazy-mlir: all_reduce op {op!r}: expected one of {sorted(_REDUCE_OPS)}")
    if not tensors or _dry_run[0] is not None:  # a dry run (check_coverage) communicates nothing
        return tensors
    reduce_op = dist.ReduceOp.SUM if op == "avg" else _REDUCE_OPS[op]
    world = dist.get_world_size(group)

    def average(piece):
        return piece / world if piece.is_floating_point() else piece // world
    return _bucketed_in_place(
        tensors, "all_reduce", group,
        lambda h: dist.all_reduce(h, op=reduce_op, group=group, async_op=True),
        bucket_bytes, average if op == "avg" else None)


def all_reduce(tensor: LazyTensor, op: str = "sum", group=None) -> LazyTensor:
    """A new lazy tensor: ``tensor`` reduced across the group."""
    _require_lazy([tensor], "all_reduce")
    out = tensor.detach().clone()
    return all_reduce_([out], op, group)[0]


def _host_input(tensor: LazyTensor) -> torch.Tensor:
    """The host data of ``tensor`` for a collective that only reads it."""
    _cut()
    host = to_host(tensor)
    return host if host.is_contiguous() else host.contiguous()


def all_gather(tensor: LazyTensor, group=None) -> LazyTensor:
    """The ranks' tensors concatenated along dim 0 (``all_gather_into_tensor``)."""
    _require_lazy([tensor], "all_gather")
    _require_group(group)
    if _dry_run[0] is not None:
        return torch.cat([tensor] * dist.get_world_size(group))
    host = _host_input(tensor)
    out = torch.empty((dist.get_world_size(group) * host.shape[0],) + tuple(host.shape[1:])
                      if host.dim() else (dist.get_world_size(group),), dtype=host.dtype)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # (renamed)
    gather(out, host, group=group)
    _count("all_gather", out.numel() * out.element_size())
    return wrap_value(data_value(out))


def reduce_scatter(tensor: LazyTensor, op: str = "sum", group=None) -> LazyTensor:
    """This rank's 1/world slice (along dim 0) of ``tensor`` reduced across
    the group (``reduce_scatter_tensor``; "avg" is a sum, then a division)."""
    _require_lazy([tensor], "reduce_scatter")
    _require_group(group)
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if tensor.shape[0] % world:
        raise ValueError(f"lazy-mlir: reduce_scatter: dim 0 ({tensor.shape[0]}) must divide "
                         f"by the world size ({world})")
    if _dry_run[0] is not None:
        return tensor.chunk(world)[rank].clone()
    host = _host_input(tensor)
    out = torch.empty((host.shape[0] // world,) + tuple(host.shape[1:]), dtype=host.dtype)
    reduce_op = dist.ReduceOp.SUM if op == "avg" else _REDUCE_OPS[op]
    dist.reduce_scatter_tensor(out, host, op=reduce_op, group=group)
    _count("reduce_scatter", host.numel() * host.element_size())
    result = wrap_value(data_value(out))
    return result / world if op == "avg" else result


def broadcast_(tensors: list, src: int = 0, group=None,
               bucket_bytes: int = BUCKET_BYTES) -> list:
    """Overwrite each lazy tensor with rank ``src``'s, in place, bucketed."""
    _require_lazy(tensors, "broadcast_")
    _require_group(group)
    if not tensors or _dry_run[0] is not None:
        return tensors
    return _bucketed_in_place(
        tensors, "broadcast", group,
        lambda h: dist.broadcast(h, src=src, group=group, async_op=True), bucket_bytes)


# ---------------------------------------------- torch.ops._c10d_functional
def _functional(func, args, kwargs):
    """``torch.ops._c10d_functional.*`` on lazy tensors: run the same op on
    the host data (PyTorch's real collective on the named group), wait for
    it, bind the result. ``wait_tensor`` is then the identity. "avg" becomes
    a sum and a division (gloo has no AVG)."""
    name = func._schema.name.split("::")[1]
    if name == "wait_tensor":
        return args[0]
    if name.endswith("_"):  # in place (all_reduce_, ...): compute, then write back
        out = dispatch(getattr(c10d, name[:-1]).default, args, kwargs)
        assign(args[0], value_of(out))
        return args[0]
    flat = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    _require_lazy(flat, f"_c10d_functional.{name}")
    if _dry_run[0] is not None:
        raise RuntimeError(f"lazy-mlir: lm.check_coverage cannot dry-run {name}: "
                           "a collective needs the other ranks")
    _cut()
    args = list(args)
    avg = False
    if "reduce_op" in [a.name for a in func._schema.arguments]:
        pos = [a.name for a in func._schema.arguments].index("reduce_op")
        if pos < len(args) and str(args[pos]).lower() == "avg":
            args[pos], avg = "sum", True
    hargs = [_contiguous_host(a) for a in args]
    hkwargs = {k: _contiguous_host(v) for k, v in kwargs.items()}
    with torch.utils._mode_utils.no_dispatch():
        out = func(*hargs, **hkwargs)
        outs = out if isinstance(out, (list, tuple)) else [out]
        outs = [c10d.wait_tensor.default(o) for o in outs]
    _count(name, sum(o.numel() * o.element_size() for o in outs))
    world = dist.get_world_size(_group_named(args))
    lazy = [wrap_value(data_value(o)) for o in outs]
    if avg:
        lazy = [o / world for o in lazy]
    return lazy if isinstance(out, (list, tuple)) else lazy[0]


def _group_named(args):
    """The process group a functional collective names (its last string argument)."""
    from torch.distributed.distributed_c10d import _resolve_process_group
    names = [a for a in args if isinstance(a, str)]
    return _resolve_process_group(names[-1]) if names else None


def _contiguous_host(a):
    if isinstance(a, LazyTensor):
        host = to_host(a)
        return host if host.is_contiguous() else host.contiguous()
    if isinstance(a, (list, tuple)):
        return type(a)(_contiguous_host(x) for x in a)
    return a


# ----------------------------------------------------------- torch.ops.c10d
def _c10d(func, args, kwargs):
    """``torch.ops.c10d.*`` (what ``torch.distributed.all_reduce`` and a
    ``ProcessGroup``'s methods call) on lazy tensors: run the op on host
    copies, wait for its work, write the results of its first argument (the
    tensors these ops write: ``tensors`` or ``output_tensors``) back to the
    lazy tensors. Returns what the op returns, with the lazy tensors in
    place of the host ones (its work already completed)."""
    name = func._schema.name.split("::")[1]
    if _dry_run[0] is not None:
        raise RuntimeError(f"lazy-mlir: lm.check_coverage cannot dry-run c10d.{name}: "
                           "a collective needs the other ranks")
    _cut()
    lazy_of = {}

    def to_host_copy(a):
        if isinstance(a, LazyTensor):
            h = to_host(a).clone(memory_format=torch.contiguous_format)
            lazy_of[id(h)] = a
            return h
        return a

    hargs, hkwargs = tree_map(to_host_copy, (list(args), dict(kwargs)))
    with torch.utils._mode_utils.no_dispatch():
        out = func(*hargs, **hkwargs)
    try:
        for w in (x for x in tree_flatten(out)[0] if isinstance(x, torch._C.ScriptObject)):
            w.wait()
    except RuntimeError as e:
        raise RuntimeError(f"lazy-mlir: c10d.{name} failed: a peer rank exited, or did not "
                           f"reach it within the process group's timeout ({e})") from e
    written = tree_flatten(hargs[0])[0]
    _count(name, sum(h.numel() * h.element_size() for h in written if isinstance(h, torch.Tensor)))
    for h in written:
        if isinstance(h, torch.Tensor) and id(h) in lazy_of:
            assign(lazy_of[id(h)], data_value(h))
    return tree_map(lambda x: lazy_of.get(id(x), x) if isinstance(x, torch.Tensor) else x, out)


def dispatch(func, args, kwargs):
    """The route ``dispatch.dispatch`` takes for an op of kind "collective"."""
    if func._schema.name.startswith("c10d::"):
        return _c10d(func, args, kwargs)
    return _functional(func, args, kwargs)
