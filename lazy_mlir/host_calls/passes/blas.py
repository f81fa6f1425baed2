"""Large float32 matmuls as calls into PyTorch's own ``torch.mm`` / ``torch.bmm``
(a linalg-stage pass, for the in-process cpu session only).

IREE 3.13's f32 ``mmt4d`` microkernel reaches ~100 GFLOP/s a core on this
class of machine (a 16x16 register tile, one broadcast load per FMA), MKL's
sgemm ~130-160 on the same shapes (``benchmarks/matmul_kernels.py``); at the
medium transformer size ~75% of a training step's module time is matmuls.
As torch.compile's inductor (``aten.mm`` as an extern kernel) and XLA:CPU
(Eigen/oneDNN) do, each ``linalg.matmul`` / ``linalg.batch_matmul`` of
float32 with at least ``MIN_MACS`` multiply-adds becomes a call of an
external function ``@lazy_mlir_blas.matmul`` / ``.batch_matmul``: iree-compile
turns it into an import taking and returning ``!hal.buffer_view``, and
``host_calls.runtime.blas`` implements it (an ``iree.runtime.PyModuleInterface``
registered before the module) with ``torch.mm(a, b, out=c)`` on the mapped
host buffers. One 1024x2048x512 matmul, one thread, process CPU time: IREE
19.0-20.5 ms, the call 13.8-14.4 (torch.mm alone 12.0-12.2).

The call is synchronous: IREE waits for its operands and the call's result is
ready when it returns, so each call is a host sync point (~6-25 us of call
overhead measured at 64x64x64). Hence ``MIN_MACS``: the tiny suite's largest
matmul (128x512x64, 4.2 M multiply-adds) stays IREE's; the medium suite's
smallest (attention's 64 x 128x128x64, 67 M) is called.

bf16 products (autocast) are called too: IREE 3.13 runs them at its float32
speed, PyTorch's oneDNN with AMX/AVX512_BF16 7-10x faster. torch-mlir writes
a bf16 ``mm`` as a matmul of bf16 operands accumulating in float32, rounded
by a ``truncf`` (``@lazy_mlir_blas.matmul_bf16_rounded``: eager's bf16 ``mm``);
autocast's ``addmm`` as a float32 matmul of ``extf``-widened bf16 operands,
the bias added before rounding (``.matmul_bf16``, an unrounded float32
result: ``host_calls/runtime/bf16_gemm.py``). The calls read the bf16
operands, not the widened copies.

A transposed operand (torch-mlir writes ``a @ w.t()`` as a ``linalg.transpose``
feeding the matmul) is passed as it lies with a flag: ``torch.mm`` reads it as
a transposed view, no copy. Only matmuls accumulating into a zero
``linalg.fill`` (torch-mlir's ``aten.mm``/``bmm``; ``addmm`` is a matmul and
an add) with static shapes are taken; everything else stays IREE's.

Nothing here may reach an artifact that runs without PyTorch (export), nor a
GPU target: ``PipelineConfig.host_blas`` is off unless the in-process cpu
session turns it on (``host_calls.runtime.switches.session_config``).
"""
from __future__ import annotations

import math

from ...dialects import linalg_edit as E

MODULE = "lazy_mlir_blas"
"""The name of the import module (the runtime registers it under this name)."""

MIN_MACS = 1 << 24
"""Smallest matmul (multiply-adds, batch included) called: 16.8 M, e.g.
256x256x256. At 256^3 the call already ran at 0.94x IREE's time (one thread,
0.244 against 0.259 ms); at 1024x512x512 (268 M) 0.70x. Below, the call's
fixed cost and the host sync it forces outweigh a faster kernel."""

MAX_LOOPS = 8
"""Loops (``scf.for`` directly in a function's body) from which a module
gets no call. IREE 3.13's whole-module analyses of its stream dialect
(resource usage, timepoint coverage: ``DFX::Solver``) stop after 32
iterations, and a module then fails ("failed to solve for usage analysis",
"failed to solve for timepoint coverage"); a chain of loops whose value
reaches a call's operand costs about two each, as the call exports it to
the host: 18 chained one-carry loops before a call fail where 17 compile
(``tests/unit/test_host_blas_rewrite.py``), and the 10 LSTM layers of PyTorch's
word-language-model example's evaluation (two nested loops each, eight
carries) failed beside one call. Without calls such a module compiles; its
matmuls stay IREE's."""

_FUNCTION = "lazy_mlir_blas_call_"
CALL_PREFIX = "call @" + _FUNCTION
"""How a rewritten matmul reads in the printed module."""

# matmul kind -> (rank, the transpose permutation that swaps the last two dims)
_KINDS = {"linalg.matmul": ("matmul", 2, [1, 0]),
          "linalg.batch_matmul": ("batch_matmul", 3, [0, 2, 1])}


def _dims(dims) -> str:
    return "x".join(map(str, dims))


def _tensor(dims, element: str = "f32") -> str:
    return f"tensor<{_dims(dims)}x{element}>"


def _dynamic(rank: int, element: str) -> str:
    return "tensor<" + "?x" * rank + f"{element}>"


def _declaration(callee: str, rank: int, element: str) -> str:
    operand, result = _dynamic(rank, element), _dynamic(rank, "f32")
    return (f"func.func private @{MODULE}.{callee}({operand}, {operand}, i32, i32) -> "
            f"{result}\n")


def _wrapper(name: str, callee: str, a: list[int], b: list[int], out: list[int],
             ta: bool, tb: bool, element: str) -> str:
    """``@name(a, b) -> out``: the import called on dynamically shaped views."""
    operand, result = _dynamic(len(out), element), _dynamic(len(out), "f32")
    return "\n".join([
        f"func.func private @{name}(%a: {_tensor(a, element)}, %b: {_tensor(b, element)}) "
        f"-> {_tensor(out)} {{",
        f"  %ad = tensor.cast %a : {_tensor(a, element)} to {operand}",
        f"  %bd = tensor.cast %b : {_tensor(b, element)} to {operand}",
        f"  %ta = arith.constant {int(ta)} : i32",
        f"  %tb = arith.constant {int(tb)} : i32",
        f"  %r = func.call @{MODULE}.{callee}(%ad, %bd, %ta, %tb) : "
        f"({operand}, {operand}, i32, i32) -> {result}",
        f"  %rs = tensor.cast %r : {result} to {_tensor(out)}",
        f"  return %rs : {_tensor(out)}", "}", ""])


def _untransposed(value, swap: list[int]):
    """(the tensor a ``linalg.transpose`` by ``swap`` read, True), or (value, False)."""
    op = E.producer(value)
    if op is not None and op.name == "linalg.transpose" and E.i64_array(
            op, "permutation") == swap and E.shape(op.operands[0]) is not None:
        return op.operands[0], True
    return value, False


def _widened(value):
    """The bf16 tensor an elementwise ``arith.extf`` widened into ``value``
    (torch-mlir's upcast of autocast's ``addmm``), or None."""
    op = E.producer(value)
    return op.operands[0] if E.elementwise(op, "arith.extf", "bf16", "f32") else None


def _only_rounded(value) -> bool:
    """Every user of ``value`` rounds it to bf16 (torch-mlir's ``aten.mm`` of
    bf16: a float32 accumulation, then ``truncf``)."""
    users = E.users(value)
    return bool(users) and all(E.elementwise(u, "arith.truncf", "f32", "bf16") for u in users)


def _operands(op) -> tuple[str, list] | None:
    """(callee suffix, [a, b]) of a matmul the pass takes: float32 operands as
    they are (``""``); bf16 ones, read as they lie or before an ``extf``,
    ``_bf16`` (float32 result, exact) or ``_bf16_rounded`` (rounded to bf16
    as eager's bf16 ``mm`` rounds, where every user rounds it anyway)."""
    a, b = op.operands[0], op.operands[1]
    kinds = {E.element_type(a), E.element_type(b)}
    if kinds == {"f32"}:
        wa, wb = _widened(a), _widened(b)
        if wa is None or wb is None:
            return "", [a, b]
        a, b = wa, wb
    elif kinds != {"bf16"}:
        return None
    return ("_bf16_rounded" if _only_rounded(op.results[0]) else "_bf16"), [a, b]


def _rewritable(op, rank: int, min_macs: int) -> bool:
    if len(op.operands) != 3 or len(op.results) != 1:
        return False
    shapes = [E.shape(v) for v in op.operands]
    if any(s is None or len(s) != rank for s in shapes):
        return False
    if E.element_type(op.operands[2]) != "f32":
        return False
    if not E.plain_matmul_maps(op) or "cast" in op.attributes:  # not plain a @ b
        return False
    a, b = shapes[0], shapes[1]
    if math.prod(a) * b[-1] < min_macs:
        return False
    return E.zero_fill(op.operands[2])


def _loops(module) -> int:
    """The most ``scf.for`` loops directly in one function's body."""
    return max((sum(op.name == "scf.for" for op in body) for body in E.function_bodies(module)),
               default=0)


def matmuls_as_calls(module, min_macs: int = MIN_MACS) -> int:
    """Rewrite the module's large float32 and bf16 ``linalg.matmul`` and
    ``linalg.batch_matmul`` ops into calls of the ``MODULE`` import, in place;
    returns how many (none in a module of ``MAX_LOOPS`` loops)."""
    if _loops(module) >= MAX_LOOPS:
        return 0
    functions: dict[str, str] = {}   # name -> text (declarations, then wrappers)
    sites = []
    for op_name, (kind, rank, swap) in _KINDS.items():
        for op in E.ops_named(module, op_name):
            taken = _operands(op) if _rewritable(op, rank, min_macs) else None
            if taken is None:
                continue
            suffix, (a, b) = taken
            element = "bf16" if suffix else "f32"
            a, ta = _untransposed(a, swap)
            b, tb = _untransposed(b, swap)
            sa, sb, out = E.shape(a), E.shape(b), E.shape(op.results[0])
            callee = kind + suffix
            name = f"{_FUNCTION}{callee}_{int(ta)}{int(tb)}_{_dims(sa)}_{_dims(sb)}"
            functions.setdefault(f"{MODULE}.{callee}", _declaration(callee, rank, element))
            functions.setdefault(name, _wrapper(name, callee, sa, sb, out, ta, tb, element))
            sites.append((op, name, [a, b]))
    if sites:  # one parse: the wrappers call the declarations
        E.add_functions(module, "\n".join(functions.values()))
    E.calls_instead(sites)  # (operands may be other sites' results: all at once)
    return len(sites)
