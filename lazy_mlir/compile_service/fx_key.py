"""A key of an fx module by content, blind to node names: the key under which
a loaded module is shared between ways in.

The lazy device keys its graphs by their capture (``Graph.key``, computed as
ops are recorded), the Dynamo backend by its aot graph's code: two keys for
one computation. Both hand the compile service a tensor-only fx module to
compile; ``fx_content_key`` of that module is the same when they compute the
same thing, so the second way in finds the first one's loaded module instead
of compiling it again (``lookup.executable_for``).
"""
from __future__ import annotations

import hashlib

import torch
import torch.fx as fx


def fx_content_key(gm: fx.GraphModule) -> str | None:
    """sha256 of what the module compiled from ``gm`` depends on: each
    input's dtype, sizes and strides, each op with its arguments (earlier
    nodes by position), and the results. None for a module that holds
    constants or submodules (their contents are not hashed here)."""
    h = hashlib.sha256(b"fx-content:1\n")
    position: dict[fx.Node, int] = {}

    def arg(a):
        if isinstance(a, fx.Node):
            return f"%{position[a]}"
        if isinstance(a, (tuple, list)):
            return "(" + ",".join(arg(x) for x in a) + ")"
        if isinstance(a, dict):
            return "{" + ",".join(f"{k}={arg(v)}" for k, v in sorted(a.items())) + "}"
        if isinstance(a, (bool, int, float, str, type(None), torch.dtype, torch.device,
                          torch.layout, torch.memory_format)):
            return repr(a)
        raise _Unkeyable

    try:
        for i, node in enumerate(gm.graph.nodes):
            position[node] = i
            if node.op == "placeholder":
                val = node.meta.get("val")
                if not isinstance(val, torch.Tensor):
                    return None
                line = f"in {val.dtype} {tuple(val.shape)} {tuple(val.stride())}"
            elif node.op == "call_function":
                name = getattr(node.target, "name", None)
                op = name() if callable(name) else f"{node.target.__module__}.{node.target.__name__}"
                line = f"{op} {arg(node.args)} {arg(node.kwargs)}"
            elif node.op == "output":
                line = f"out {arg(node.args)}"
            else:  # get_attr, call_module, call_method
                return None
            h.update(line.encode() + b"\n")
    except (_Unkeyable, AttributeError):
        return None
    return h.hexdigest()


class _Unkeyable(Exception):
    """An argument whose value this key cannot spell."""
