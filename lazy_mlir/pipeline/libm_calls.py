"""float64 functions IREE's CPU code calls from the C library.

IREE 3.13 approximates float32 ``sin``, ``fmod``, ``atan2``, ... with
polynomials, but emits a call to the C library's function for float64.
Its default output is an embedded ELF linked with no C library: the link
failed (``iree-lld: error: undefined symbol: sin``) and the graph ran
eagerly. Linked as a system shared library instead
(``--iree-llvmcpu-link-embedded=false``, the host's linker), the calls
resolve against the process's C math library when IREE's runtime loads the
module: eager's own functions, so eager's values. Only a module that calls
one is linked so (an embedded ELF needs no linker on the host). Such a
module is also compiled without IREE's constant evaluation: it JIT-compiles
a constant subexpression (``sin`` of a ``fill_(3.0)``) as an embedded ELF of
its own, whose link failed the same way (fuzzer seed 800088 under
torch.compile, ``jit_eval_dispatch``); the calls then run at run time.
"""
from __future__ import annotations

import re

SYSTEM_LINK = "--iree-llvmcpu-link-embedded=false"
NO_CONST_EVAL = "--iree-opt-const-eval=false"

# The float64 ops whose lowering is a C library call (measured with IREE
# 3.13's llvm-cpu backend; tan becomes a call of cos, remf of fmod).
_CALLS = re.compile(r"(?:math\.(?:sin|cos|tan|atan|atan2|asin|acos|tanh|log2|log10)"
                    r"|arith\.remf) [^\n]*:\s*(?:vector<[^>]*x)?f64\b")


def calls_libm(linalg_text: str) -> bool:
    """Whether a linalg module holds a float64 op that IREE's CPU code
    compiles to a C library call."""
    return _CALLS.search(linalg_text) is not None


def link_flags(backend: str, linalg_text: str) -> list[str]:
    """The flags that let a module calling the C library link, for ``backend``."""
    if backend == "llvm-cpu" and calls_libm(linalg_text):
        return [SYSTEM_LINK, NO_CONST_EVAL]
    return []
