"""Sums over the leading dimensions in two stages (a linalg-stage pass, cpu only).

A bias or LayerNorm-weight gradient is a column sum: ``g.sum((0, 1))`` of a
``[B, L, N]`` tensor, a ``linalg.generic`` whose reduction loops are the
outer ones. IREE 3.13's cpu codegen puts the reduction loop innermost: each
workgroup walks a strip of 16-32 columns down all ``B*L`` rows, a stride of
a row (8 KB for N = 2048: every load of a strip falls in the same cache set)
per step. When the product that is summed is fused in (``(g * xhat).sum``,
the LayerNorm weight's gradient) IREE takes the dispatch for a matvec and
vectorizes the strided reduction dimension itself. One thread, process CPU,
1024 rows, ``iree-benchmark-module`` (eager ``torch.sum`` in brackets):

- plain, N = 2048: 0.83-0.86 ms (0.47-0.51); N = 512: 0.082 (0.04)
- with the product fused, N = 512: 1.10-1.16 ms (0.32 with the product);
  N = 2048: 7.8-8.3

Summed in two stages, ``[R, N] -> [R/K, K, N] -> [R/K, N] -> [N]``, the
first stage walks K rows at a time: with K = 8 those became 0.53-0.62,
0.072, 0.36-0.37 and 2.6-2.8 ms. (K = 32 was best for a plain sum, 0.47-0.51
and 0.05, but 0.57 and 3.0-3.5 with a product; the pass cannot know which
producers IREE fuses, so one K.) The rewritten op becomes a call of a
private function holding the two stages (IREE inlines it and fuses the
producer into the first). Rounding differs from the one-stage sum: the
addition order changes, as it does between eager's own kernels.
"""
from __future__ import annotations

import math

from ..dialects import linalg_edit as E

CHUNK = 8
"""Rows summed by the first stage per partial sum (``K`` above)."""

MIN_ROWS = 256
"""Fewest rows (the reduced dimensions' product) rewritten: the tiny suite's
B*L = 128 rows fit in cache either way and stay one stage."""

_FUNCTION = "lazy_mlir_column_sum_"
CALL_PREFIX = "call @" + _FUNCTION
"""How a rewritten sum reads in the printed module."""


def _tensor(dims) -> str:
    return "tensor<" + "".join(f"{d}x" for d in dims) + "f32>"


def _column_sum(op) -> tuple[int, int] | None:
    """(rows, reduced dimensions) when ``op`` is a plain f32 sum over its
    leading dimensions into a zero-filled output; None otherwise."""
    if op.name != "linalg.generic" or len(op.operands) != 2 or len(op.results) != 1:
        return None
    iterators = [str(a) for a in op.attributes["iterator_types"]]
    reduced = sum(1 for it in iterators if "reduction" in it)
    if not 0 < reduced < len(iterators) or any(
            "reduction" in it for it in iterators[reduced:]):
        return None
    shape = E.shape(op.operands[0])
    if shape is None or len(shape) != len(iterators) or E.element_type(op.operands[0]) != "f32":
        return None
    maps = [str(m) for m in op.attributes["indexing_maps"]]
    dims = [f"d{i}" for i in range(len(iterators))]
    if maps[0] != f"affine_map<({', '.join(dims)}) -> ({', '.join(dims)})>":
        return None
    kept = maps[1].split("->")[1].strip(" ()>").split(", ")
    if [d for d in kept if d != "0"] != dims[reduced:]:  # (0, d1): torch's keepdim
        return None
    if not _adds_into_output(op) or not E.zero_fill(op.operands[1]):
        return None
    rows = math.prod(shape[:reduced])
    if rows < MIN_ROWS or rows % CHUNK:
        return None
    return rows, reduced


def _adds_into_output(op) -> bool:
    """Whether the body is ``yield(in + out)``."""
    block = op.regions[0].blocks[0]
    body = list(block.operations)
    if len(body) != 2 or body[0].name != "arith.addf" or body[1].name != "linalg.yield":
        return False
    return (len(body[0].operands) == 2  # both the block's arguments (no producer)
            and all(E.producer(v) is None for v in body[0].operands)
            and body[1].operands[0] == body[0].results[0])


def _sum_body(tag: str) -> list[str]:
    return [f"  ^bb0(%in{tag}: f32, %out{tag}: f32):",
            f"    %s{tag} = arith.addf %in{tag}, %out{tag} : f32",
            f"    linalg.yield %s{tag} : f32"]


def _two_stage(name: str, shape: list[int], reduced: int, out: list[int]) -> str:
    """``@name(x: shape) -> out``: the sum over ``shape[:reduced]`` in two stages."""
    rows, cols = math.prod(shape[:reduced]), math.prod(shape[reduced:])
    parts = rows // CHUNK
    flat, chunked, partial = [rows, cols], [parts, CHUNK, cols], [parts, cols]
    groups = [list(range(reduced)), list(range(reduced, len(shape)))]
    lines = [f"func.func private @{name}(%x: {_tensor(shape)}) -> {_tensor(out)} {{",
             "  %zero = arith.constant 0.0 : f32"]
    src = "%x"
    if shape != flat:
        lines.append(f"  %flat = tensor.collapse_shape %x {groups} : {_tensor(shape)} into "
                     f"{_tensor(flat)}")
        src = "%flat"
    lines += [
        f"  %chunked = tensor.expand_shape {src} [[0, 1], [2]] output_shape {chunked} : "
        f"{_tensor(flat)} into {_tensor(chunked)}",
        f"  %e1 = tensor.empty() : {_tensor(partial)}",
        f"  %f1 = linalg.fill ins(%zero : f32) outs(%e1 : {_tensor(partial)}) -> "
        f"{_tensor(partial)}",
        "  %partial = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, "
        "affine_map<(d0, d1, d2) -> (d0, d2)>], iterator_types = "
        "[\"parallel\", \"reduction\", \"parallel\"]} "
        f"ins(%chunked : {_tensor(chunked)}) outs(%f1 : {_tensor(partial)}) {{",
        *_sum_body("1"), f"  }} -> {_tensor(partial)}",
        f"  %e2 = tensor.empty() : {_tensor([cols])}",
        f"  %f2 = linalg.fill ins(%zero : f32) outs(%e2 : {_tensor([cols])}) -> "
        f"{_tensor([cols])}",
        "  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
        "affine_map<(d0, d1) -> (d1)>], iterator_types = [\"reduction\", \"parallel\"]} "
        f"ins(%partial : {_tensor(partial)}) outs(%f2 : {_tensor([cols])}) {{",
        *_sum_body("2"), f"  }} -> {_tensor([cols])}"]
    result = "%sum"
    if out != [cols]:
        lines.append(f"  %shaped = tensor.expand_shape %sum [{list(range(len(out)))}] "
                     f"output_shape {out} : {_tensor([cols])} into {_tensor(out)}")
        result = "%shaped"
    lines += [f"  return {result} : {_tensor(out)}", "}", ""]
    return "\n".join(lines)


def column_sums_in_two_stages(module) -> int:
    """Rewrite the module's f32 sums over leading dimensions (at least
    ``MIN_ROWS`` rows) into calls of two-stage functions, in place; returns
    how many."""
    functions: dict[str, str] = {}
    sites = []
    for op in E.ops_named(module, "linalg.generic"):
        found = _column_sum(op)
        if found is None:
            continue
        rows, reduced = found
        shape, out = E.shape(op.operands[0]), E.shape(op.results[0])
        if out is None:
            continue
        name = (f"{_FUNCTION}{'x'.join(map(str, shape))}_over{reduced}_to_"
                f"{'x'.join(map(str, out))}")
        functions.setdefault(name, _two_stage(name, shape, reduced, out))
        sites.append((op, name))
    if sites:
        E.add_functions(module, "\n".join(functions.values()))
    for op, name in sites:
        E.call_instead(op, name, [op.operands[0]])
    return len(sites)
