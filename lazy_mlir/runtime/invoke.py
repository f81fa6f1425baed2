"""Calling a loaded module's ``main`` with little Python per argument and result.

iree.runtime's ``FunctionInvoker`` converts every result in Python
(``_extract_vm_sequence_to_python``: bookkeeping for error messages, an ABI
lookup, a converter call and a ``DeviceArray`` per result). A training step's
graph has one result per parameter, gradient and optimizer state (GPT-2
tiny: 142), so that was ~0.3-0.4 ms of every run, on the thread ``loss.item()``
waits for. ``invoker(fn)`` calls the same VM function with the same C++
argument packer and makes the same ``DeviceArray`` per result, with the
dtypes looked up once per module. A function whose results are not a flat
list of arrays keeps the ``FunctionInvoker``.
"""
from __future__ import annotations


def invoker(fn, device=None):
    """``call(args) -> tuple`` of ``fn(*args)``'s results (``fn``: the
    ``FunctionInvoker`` of a module's ``main``), always a tuple; ``fn``
    itself, wrapped so, when its ABI is not one ``invoker`` reads. Results
    are ``DeviceArray``s of ``device`` (default: ``fn``'s own)."""
    fast = _fast(fn, device)
    if fast is not None:
        return fast

    def call(args):
        out = fn(*args)
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)
    return call


def _fast(fn, result_device=None):
    """The direct call, or None (an iree.runtime without these internals,
    results that are not all arrays, nested or inlined results)."""
    try:
        from iree.runtime import DeviceArray, HalBufferView, VmVariantList
        from iree.runtime._binding import InvokeContext
        from iree.runtime.dtypes import map_abi_type_to_dtype_info
        from iree.runtime import function as functions
        context, function = fn._vm_context, fn._vm_function
        packer, device, descs = fn._arg_packer, fn._device, fn._ret_descs
        if fn._has_inlined_results:
            return None
        if descs is None:  # no reflection (our modules): arrays of their own dtype
            dtypes = None
        elif all(isinstance(d, list) and d and d[0] == "ndarray" for d in descs):
            dtypes = tuple(map_abi_type_to_dtype_info(d[1]).dtype for d in descs)
        else:
            return None
    except (ImportError, AttributeError, KeyError, TypeError, IndexError):
        return None
    invoke = context.invoke
    new = object.__new__
    made_by = result_device or device
    capacity = 1 if descs is None else len(descs)

    def call(args):
        arg_list = packer.pack(InvokeContext(device), args, {})
        results = VmVariantList(capacity)
        invoke(function, arg_list, results)
        n = len(results)
        if not n:
            return ()
        get = results.get_as_object
        try:
            # The first result through DeviceArray's constructor; the others
            # copy its attributes (the same arrays, without an __init__ each).
            first = DeviceArray(made_by, get(0, HalBufferView), implicit_host_transfer=True,
                                override_dtype=None if dtypes is None else dtypes[0])
            outs = [first]
            attrs = first.__dict__
            for i in range(1, n):
                a = new(DeviceArray)
                a.__dict__ = d = attrs.copy()
                d["_buffer_view"] = get(i, HalBufferView)
                if dtypes is not None:
                    d["_override_dtype"] = dtypes[i]
                outs.append(a)
        except (TypeError, ValueError, RuntimeError):  # a result that is no buffer view
            outs = functions._extract_vm_sequence_to_python(functions.Invocation(device),
                                                            results, descs)
        return tuple(outs)
    return call


def views_of_arguments(session, args: list, outs) -> tuple | None:
    """``(result, (argument, ...))`` for each result whose memory overlaps
    that of arguments (IREE returned a view of them), from the arrays of one
    call on a host-memory device; None when some address cannot be read."""
    arg_spans = [_span(session, a) for a in args]
    out_spans = [_span(session, o) for o in outs]
    if None in arg_spans or None in out_spans:
        return None
    views = []
    for r, (start, end) in enumerate(out_spans):
        of = tuple(i for i, (s, e) in enumerate(arg_spans) if start < e and s < end)
        if of:
            views.append((r, of))
    return tuple(views)


def _span(session, array) -> tuple[int, int] | None:
    """(first, past the last) address of a device array's bytes ((0, 0) when
    it has none), or None when the host cannot see them."""
    import torch
    view = array._buffer_view
    n = view.byte_length
    if n == 0:
        return (0, 0)
    try:
        t = torch.from_dlpack(session.device.create_dlpack_capsule(view, 1, 0))
    except Exception:  # noqa: BLE001 - not host memory, or a type DLPack lacks
        return None
    return (t.data_ptr(), t.data_ptr() + n)
