"""``lazy-mlir explain-op aten.X [--target cpu|vulkan|cuda]``: how one aten
op reaches the compiler (``lm.debug.explain_op``)."""
from __future__ import annotations

from .errors import UsageError


def run_explain(args) -> int:
    from ..frontends.debug import explain_op
    try:
        print(explain_op(args.op, target=args.target))
    except ValueError as e:
        raise UsageError(str(e)) from None
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("explain-op", help="how an aten op reaches the compiler: compiled, "
                                          "decomposed (where, by what) or falling back (why)")
    p.add_argument("op", help="aten.X or aten.X.overload (aten.convolution.default)")
    p.add_argument("--target", default="cpu", choices=("cpu", "vulkan", "cuda"),
                   help="the compile target (cpu)")
    p.set_defaults(func=run_explain)
