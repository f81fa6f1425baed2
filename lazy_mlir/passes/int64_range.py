"""Whether a graph's 64-bit integers fit 32 bits (an fx analysis, per target).

IREE 3.13's SPIR-V code generation cannot compile some dispatches with
64-bit integer vectors (``failed to legalize operation 'vector.broadcast'``
on ``(i64) -> vector<1xi64>``, ``'vector.extract'`` on ``vector<2xi64>``):
the index operands of a scatter (the backward of ``embedding`` and
``nll_loss``), a causal mask built from ``arange``. This happens with and
without the device's Int64 capability. The vulkan target therefore compiles
with ``--iree-input-demote-i64-to-i32`` (``targets.VULKAN_I64_DEMOTION``):
int64 tensors, arguments and results included, are 32-bit on the device.

That is only right where every int64 value fits 32 bits. This analysis
propagates value intervals through the graph: int64 arguments are assumed
in the int32 range (``runtime.session`` checks every int64 tensor it moves
to such a device and raises for one that does not fit), ``arange`` and
shapes bound indices, and arithmetic, sums and casts are followed. A graph
with an int64 value it cannot bound to 32 bits (``i * 3`` of an unbounded
``i``, a float cast to int64, an op it does not know) is refused: it then
runs eagerly, counted as a fallback, never with wrapped integers.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

aten = torch.ops.aten
prims = torch.ops.prims

I32 = (-(2 ** 31), 2 ** 31 - 1)
ARGUMENT = (-(2 ** 30 - 1), 2 ** 30 - 1)
"""Where int64 arguments and results of a narrowed graph lie: half the int32
range, so that the sum or difference of two (index arithmetic: a causal
mask's ``j - i``) still fits. ``runtime.session`` checks data moved in; a
graph whose int64 results may leave it is refused, so device data made by
one graph meets the next graph's assumption."""
_INF = (-math.inf, math.inf)

_SAME = {  # ops whose integer result takes its values from the first tensor argument
    "view", "reshape", "_unsafe_view", "expand", "permute", "transpose", "t", "slice",
    "select", "squeeze", "unsqueeze", "clone", "alias", "contiguous", "flatten", "detach",
    "lift_fresh_copy", "index", "gather", "index_select", "take", "repeat", "roll", "flip",
    "narrow", "as_strided", "diagonal", "amax", "amin", "max", "min", "expand_copy",
    "view_copy", "permute_copy", "slice_copy", "select_copy", "unsqueeze_copy",
    "squeeze_copy", "transpose_copy", "t_copy", "alias_copy", "copy", "_to_copy",
    "convert_element_type", "to", "unfold", "broadcast_in_dim", "collapse_view",
    "split_dim",
}
_MERGED = {  # op -> the argument positions whose values its result takes
    "masked_fill": (0, 2), "constant_pad_nd": (0, 2), "fill": (1,), "slice_scatter": (0, 1),
    "select_scatter": (0, 1), "index_put": (0, 2), "_index_put_impl": (0, 2),
    "scatter": (0, 3), "masked_scatter": (0, 2), "where": (1, 2),
}
_POOL_INDICES = {"max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool1d_with_indices",
                 "adaptive_max_pool2d", "adaptive_max_pool1d", "adaptive_max_pool3d"}
"""Pooling ops whose int64 result is a position in the input (below its size)."""
_INDEX_RESULTS = {"argmax", "argmin", "sort", "topk", "max", "min", "kthvalue", "mode",
                  "median", "nanmedian", "cummax", "cummin", "argsort"}


def _val(node):
    return node.meta.get("val") if isinstance(node, fx.Node) else None


def _dtype_range(dtype) -> tuple[float, float]:
    if dtype == torch.bool:
        return (0, 1)
    if dtype == torch.int64:
        return ARGUMENT  # checked at the transfer to the device
    if dtype.is_floating_point or dtype.is_complex:
        return _INF
    info = torch.iinfo(dtype)
    return (info.min, info.max)


def _union(*rs):
    rs = [r for r in rs if r is not None]
    return (min(r[0] for r in rs), max(r[1] for r in rs)) if rs else _INF


def _mul(a, b):
    prods = [x * y for x in a for y in b if not (math.isinf(x) and y == 0)
             and not (math.isinf(y) and x == 0)]
    return (min(prods), max(prods)) if prods else (0, 0)


class _Ranges:
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.r: dict[fx.Node, object] = {}

    def of(self, arg):
        """The interval of an argument (a node, a Python number, a list)."""
        if isinstance(arg, fx.Node):
            return self.r.get(arg, _INF)
        if isinstance(arg, bool):
            return (int(arg), int(arg))
        if isinstance(arg, (int, float)):
            return (arg, arg)
        return None

    def run(self) -> str | None:
        for node in self.gm.graph.nodes:
            if node.op == "output":
                return self.check_results(node)
            self.r[node] = self.node_range(node)
            val = _val(node)
            vals = val if isinstance(val, (list, tuple)) else (val,)
            rng = self.r[node]
            rngs = rng if isinstance(rng, list) else [rng] * len(vals)
            for v, rg in zip(vals, rngs):
                if isinstance(v, torch.Tensor) and v.dtype == torch.int64 and (
                        rg is None or rg[0] < I32[0] or rg[1] > I32[1]):
                    where = node.meta.get("stack_trace", "") or ""
                    return (f"{node.target} may make int64 values outside 32 bits "
                            f"({rg}){' at ' + where.strip().splitlines()[-1] if where else ''}")
        return None

    def check_results(self, node: fx.Node) -> str | None:
        outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else (node.args[0],)
        for out in outs:
            v = _val(out)
            if isinstance(v, torch.Tensor) and v.dtype == torch.int64:
                rg = self.of(out)
                if rg[0] < ARGUMENT[0] or rg[1] > ARGUMENT[1]:
                    return (f"its int64 result {out.name} may leave +-(2**30 - 1) ({rg}), the "
                            "range int64 data keeps on the device")
        return None

    def node_range(self, node: fx.Node):
        val = _val(node)
        if node.op == "placeholder":
            return _dtype_range(val.dtype) if isinstance(val, torch.Tensor) else _INF
        if node.op == "get_attr":
            t = getattr(self.gm, node.target, None)
            if isinstance(t, torch.Tensor) and t.numel() and not t.is_floating_point():
                return (int(t.min()), int(t.max()))
            return _dtype_range(t.dtype) if isinstance(t, torch.Tensor) else _INF
        if node.op != "call_function":
            return _INF
        if node.target is operator.getitem:
            src = self.r.get(node.args[0])
            return src[node.args[1]] if isinstance(src, list) else src
        if node.target is torch.ops.higher_order.while_loop:
            return self.counted_loop(node, val)
        if isinstance(val, (list, tuple)):
            return self.multi(node, val)
        if not isinstance(val, torch.Tensor):
            return _INF
        if val.dtype == torch.bool or not (val.dtype == torch.int64):
            return _dtype_range(val.dtype)
        return self.int64_range(node, val)

    def counted_loop(self, node, vals):
        """A ``while_loop`` as ``ops/loops.fori`` makes it (condition ``i < n``
        on the first carry, which starts at 0 and grows by 1): the counter
        ends at ``n``; its body's int64 values are the counter's arithmetic
        (``0 .. n``; the body graph is not walked). Other int64 carries, or
        another loop, are unbounded."""
        trips = _counted_trips(self.gm, node)
        out = []
        for k, v in enumerate(vals):
            if not isinstance(v, torch.Tensor) or v.dtype != torch.int64:
                out.append(_dtype_range(v.dtype) if isinstance(v, torch.Tensor) else _INF)
            else:
                out.append((0, trips) if k == 0 and trips is not None else _INF)
        return out

    def multi(self, node, vals):
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        first = node.args[0] if node.args else None
        size = max(_val(first).shape, default=1) if isinstance(_val(first), torch.Tensor) \
            else 2 ** 31
        out = []
        for v in vals:
            if not isinstance(v, torch.Tensor):
                out.append(_INF)
            elif v.dtype == torch.int64 and name in _POOL_INDICES:
                out.append((0, max(_val(first).numel() - 1, 0)))
            elif v.dtype == torch.int64 and name in _INDEX_RESULTS:
                out.append((0, max(size - 1, 0)))
            elif v.dtype == torch.int64 and name in _SAME:
                out.append(self.of(first))
            elif v.dtype == torch.int64:
                out.append(_INF)
            else:
                out.append(_dtype_range(v.dtype))
        return out

    def int64_range(self, node, val):
        name = getattr(node.target, "__name__", str(node.target)).split(".")[0]
        a = node.args
        src = a[0] if a else None
        src_val = _val(src)
        if name in ("arange", "iota"):
            nums = [x for x in a if isinstance(x, (int, float))]
            ends = nums[:2] if name == "arange" and len(nums) >= 2 else [0, nums[0] if nums else 0]
            return (min(ends), max(ends))
        if name in ("full", "scalar_tensor", "full_like", "new_full"):
            v = a[1] if name in ("full", "full_like", "new_full") else a[0]
            return self.of(v) or _INF
        if name in ("zeros", "zeros_like", "new_zeros", "empty", "empty_like", "new_empty",
                    "empty_strided", "empty_permuted"):
            return (0, 0)
        if name in ("ones", "ones_like", "new_ones"):
            return (1, 1)
        if name in ("_to_copy", "to", "convert_element_type", "copy") and \
                isinstance(src_val, torch.Tensor) and src_val.is_floating_point():
            return _INF  # a float cast to int64: unbounded
        if name in ("cat", "stack"):
            return _union(*[self.of(x) for x in a[0]])
        if name in _MERGED:
            if name == "constant_pad_nd" and len(a) < 3:
                return _union(self.of(src), (0, 0))
            if name == "index_put" and node.kwargs.get("accumulate", a[3] if len(a) > 3 else False):
                return _INF
            return _union(*[self.of(a[i]) for i in _MERGED[name] if i < len(a)])
        if name in ("clamp", "clamp_min", "clamp_max"):
            lo, hi = self.of(src)
            if name in ("clamp", "clamp_min") and len(a) > 1 and a[1] is not None:
                lo, hi = max(lo, self.of(a[1])[0]), max(hi, self.of(a[1])[0])
            up = a[2] if name == "clamp" and len(a) > 2 else (a[1] if name == "clamp_max" else None)
            if up is not None:
                lo, hi = min(lo, self.of(up)[1]), min(hi, self.of(up)[1])
            return (lo, hi)
        if name in ("argmax", "argmin", "argsort") and isinstance(src_val, torch.Tensor):
            return (0, max(src_val.numel() - 1, 0))
        if name in _SAME:
            return self.of(src)
        if name in ("add", "sub", "rsub", "mul", "neg", "abs", "remainder", "fmod",
                    "floor_divide", "div", "sum", "cumsum", "maximum", "minimum"):
            return self.arith(name, node, a, src_val, val)
        return _INF

    def arith(self, name, node, a, src_val, val):
        x = self.of(a[0])
        y = self.of(a[1]) if len(a) > 1 else None
        if name in ("add", "sub", "rsub"):
            alpha = node.kwargs.get("alpha", 1)
            y = _mul(y, (alpha, alpha))
            if name == "rsub":
                x, y = y, x
            return (x[0] + y[0], x[1] + y[1]) if name == "add" else (x[0] - y[1], x[1] - y[0])
        if name == "mul":
            return _mul(x, y)
        if name == "neg":
            return (-x[1], -x[0])
        if name == "abs":
            return (0, max(abs(x[0]), abs(x[1])))
        if name in ("remainder", "fmod"):
            m = max(abs(y[0]), abs(y[1]))
            return (-m, m)
        if name in ("floor_divide", "div"):
            m = max(abs(x[0]), abs(x[1]))
            return (-m, m)
        if name in ("maximum", "minimum"):
            return _union(x, y)
        if name in ("sum", "cumsum"):
            count = max(src_val.numel() // max(val.numel(), 1), 1) if name == "sum" else \
                src_val.shape[a[1]] if src_val.dim() else 1
            return (min(0, x[0] * count), max(0, x[1] * count))
        return _INF


def _counted_trips(gm: fx.GraphModule, loop: fx.Node) -> int | None:
    """``n`` when ``loop``'s condition graph is ``i < n`` on its first carry."""
    cond = loop.args[0]
    graph = getattr(gm, cond.target, None) if isinstance(cond, fx.Node) else None
    if not isinstance(graph, fx.GraphModule):
        return None
    calls = [n for n in graph.graph.nodes if n.op == "call_function"]
    first = next((n for n in graph.graph.nodes if n.op == "placeholder"), None)
    if (len(calls) == 1 and calls[0].target is torch.ops.aten.lt.Scalar
            and calls[0].args[0] is first and isinstance(calls[0].args[1], int)):
        return calls[0].args[1]
    return None


def int64_overflow_reason(gm: fx.GraphModule) -> str | None:
    """Why ``gm`` may make an int64 value outside 32 bits, or None when all
    its int64 values provably fit (int64 arguments assumed to fit)."""
    return _Ranges(gm).run()
