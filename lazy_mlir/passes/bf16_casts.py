"""Conversions to bf16 in integer arithmetic (a linalg-stage pass, cpu
target).

On a CPU without AVX512_BF16, LLVM lowers a scalar f32 -> bf16 conversion
(``arith.truncf``, and ``uitofp``/``sitofp`` to bf16: a bool mask made bf16)
to a call of ``__truncsfbf2``, which IREE 3.13's CPU linker lacks: "iree-lld:
undefined symbol: __truncsfbf2", and the whole graph ran eagerly (lm.jit
raised; fuzzer seeds 17 and 177 on an AVX2 host). Integers go to f32 first
(c10 converts them to bfloat16 through float too), and every f32 -> bf16
truncation is c10's ``round_to_nearest_even`` on the bits: the top 16 bits
after adding 0x7FFF plus the lowest kept bit, NaN as 0x7FC0.
"""
from __future__ import annotations

from ..dialects import linalg_edit as E
from ..dialects.torch_import import arith_d as arith, ir


def bf16_conversions_in_integers(module) -> int:
    """Rewrite each conversion to bf16; returns how many. (bf16 arithmetic
    itself, ``addf`` of bf16 that LLVM computes in f32 and truncates, is
    left: MLIR's ``arith-emulate-unsupported-floats`` changed a value of
    fuzzer seed 177; such a graph still fails to link there and runs
    eagerly.)"""
    count = 0
    for name in ("arith.uitofp", "arith.sitofp"):
        for op in E.ops_named(module, name):
            if str(op.results[0].type) != "bf16":
                continue
            f32 = ir.F32Type.get(op.context)
            with ir.InsertionPoint(op), op.location:
                wide = ir.Operation.create(name, results=[f32], operands=[op.operands[0]])
                _replace(op, _rounded(wide.result, op.results[0].type))
            count += 1
    for op in E.ops_named(module, "arith.truncf"):
        if str(op.results[0].type) == "bf16" and str(op.operands[0].type) == "f32":
            with ir.InsertionPoint(op), op.location:
                _replace(op, _rounded(op.operands[0], op.results[0].type))
            count += 1
    return count


def _replace(op, value) -> None:
    op.results[0].replace_all_uses_with(value)
    op.erase()


def _rounded(x, bf16):
    """f32 ``x`` rounded to bf16, to nearest even, as c10 does."""
    i32, i16 = ir.IntegerType.get_signless(32), ir.IntegerType.get_signless(16)

    def c(v):
        return arith.constant(i32, v)
    bits = arith.bitcast(i32, x)
    lsb = arith.andi(arith.shrui(bits, c(16)), c(1))
    top = arith.shrui(arith.addi(bits, arith.addi(lsb, c(0x7FFF))), c(16))
    top = arith.select(arith.cmpf(arith.CmpFPredicate.UNO, x, x), c(0x7FC0), top)
    return arith.bitcast(bf16, arith.trunci(i16, top))


def count_in(linalg_text: str) -> int:
    """The rewrite leaves no mark in the printed module: 0 (as ``f64_constants``)."""
    return 0
