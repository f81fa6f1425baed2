"""Which aten ops the pipeline can compile.

An op is supported when the torch dialect defines it (the generated op list
of torch-mlir) and it is not denied: denied ops are listed here with the
reason, and ops whose compile failed at run time are added by the runtime.
"""
from __future__ import annotations

import functools

import torch

from ..dialects.torch_ops import aten_op_names, torch_mlir_decompositions
from .registry import CAPTURE, IMPORT, build_table

aten = torch.ops.aten

# op name (as torch.ops.aten.<name>.<overload>) -> why it is not compiled
DENIED: dict[str, str] = {
    "_embedding_bag": "torch-mlir's lowering ignores per_sample_weights (a wrong weighted sum) "
                      "and gives offset2bag another shape than PyTorch's (the graph fails)",
    "kthvalue": "torch-mlir lowers it to tm_tensor.topk with a comparator region that "
                "iree-compile 3.13 rejects ('region block must end with a linalg_ext.yield i1')",
    "linalg_qr": "torch-mlir has no linalg lowering for QR (it survives to the backend "
                 "contract)",
    "logcumsumexp": "torch-mlir lowers it as log(cumsum(exp(x))), which overflows to inf for "
                    "x > 88 (float32); captured as a prefix-max-shifted decomposition instead "
                    "(precise.py)",
    "tan": "IREE's tan (sin/cos) is up to 5e-4 relative off near the poles (x = 1.5707, "
           "float32); captured as Cephes' tanf instead (precise.py)",
}
# PyTorch has no meta kernel for these (no shape to capture them with):
# captured as the CPU kernel's formula instead (fake_quantize.py)
DENIED.update(dict.fromkeys(
    ("fake_quantize_per_tensor_affine_cachemask",
     "_fake_quantize_per_tensor_affine_cachemask_tensor_qparams",
     "fake_quantize_per_channel_affine_cachemask"),
    "PyTorch has no meta kernel for it; captured as the CPU kernel's formula "
    "(fake_quantize.py)"))


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    """torch-mlir's recommended table with our IMPORT-scope registrations
    (``registry.build_table``) over it: ops torch-mlir imports but does not
    lower to linalg, or lowers differently from eager."""
    table = dict(torch_mlir_decompositions())
    table.update(build_table(IMPORT))
    return table


def dialect_ops() -> frozenset[str]:
    """The aten ops the torch dialect defines (``add.Tensor`` form)."""
    return aten_op_names()


@functools.lru_cache(maxsize=None)
def mlir_name(func) -> str:
    """``aten.add.Tensor`` -> ``add.Tensor``; default overloads drop the suffix."""
    base, overload = func.__name__.split(".")[0], func._overloadname
    return base if overload == "default" else f"{base}.{overload}"


@functools.lru_cache(maxsize=None)
def _static_support(func) -> bool:
    """In the torch dialect, or decomposed into it before import, and not a
    random op: torch-mlir lowers those (``randn_like``, ``bernoulli``,
    ``multinomial``, ...) with a generator of its own, which
    ``torch.manual_seed`` does not reach (the same numbers every step). The
    lazy device draws from PyTorch's CPU generator instead: its fills are
    special ops (``lazy/kinds.RANDOM``), ``ops/random_fills.py`` writes more
    as fills, and the others run eagerly."""
    if torch.Tag.nondeterministic_seeded in func.tags and not _random_only_by_dropout(func):
        return False
    return mlir_name(func) in dialect_ops() or func in decomposition_table()


# Ops tagged random for a dropout probability argument alone (RNNs between
# layers, attention's dropout_p, dropout's train): capture takes their
# randomness apart (``lazy/rnn.py``, ``lazy/attention.py``, dropout's own path).
_DROPOUT_ARGS = frozenset({"dropout", "dropout_p", "train"})


def _random_only_by_dropout(func) -> bool:
    return any(a.name in _DROPOUT_ARGS for a in func._schema.arguments)


@functools.lru_cache(maxsize=None)
def decomposed_before_import(func) -> bool:
    """Not in the torch dialect: imported through ``decomposition_table``."""
    return mlir_name(func) not in dialect_ops() and func in decomposition_table()


def op_is_supported(func) -> bool:
    try:  # kept on the op: the lru_caches hash an OpOverload in Python, per captured op
        static, name = func._lazy_mlir_support
    except AttributeError:
        static, name = _static_support(func), mlir_name(func)
        try:
            func._lazy_mlir_support = (static, name)
        except (AttributeError, TypeError):
            pass
    return static and name not in DENIED


def deny(func_name: str, why: str) -> None:
    """Stop compiling an op (``add.Tensor`` form) for the rest of the process."""
    DENIED[func_name] = why


# op name -> {argument signature: why}: compiles that failed for one kind of
# arguments (a 0-d flip) stop only that kind, not every later use of the op.
DENIED_SIGNATURES: dict[str, dict[tuple, str]] = {}

# op name -> why it runs eagerly for float64 arguments: no float64 lowering
# (IREE 3.13 approximates erf in float32 only, "failed to legalize operation
# 'math.erf' that was explicitly marked illegal"; torch-mlir has none of the
# others). Each compile of a graph with one failed and the whole graph ran
# eagerly before the op was denied; now the op alone runs eagerly (counted
# as aten::<op>), from its first call, and the rest of its graph compiles.
FLOAT64_EAGER: dict[str, str] = {
    name: f"no float64 {name} in IREE 3.13 or torch-mlir (float32 compiles)"
    for name in ("erf", "erfc", "erfinv", "lgamma", "special_erfcx")
}
FLOAT64_EAGER_OPS = frozenset(getattr(aten, name).default for name in FLOAT64_EAGER)


def deny_signature(func_name: str, signature: tuple, why: str) -> None:
    """Stop compiling an op for arguments of this ``signature``
    (``lazy.ir.arg_signature``) for the rest of the process."""
    DENIED_SIGNATURES.setdefault(func_name, {})[signature] = why


def denied_signature(func, signature_of) -> str | None:
    """Why ``func`` is not compiled for these arguments (``signature_of()``
    computes their signature, only when the op has denied signatures)."""
    name = mlir_name(func)
    sigs = DENIED_SIGNATURES.get(name)
    if name in FLOAT64_EAGER:
        signature = signature_of()
        if any(type(a) is tuple and a[0] is torch.float64 for a in signature):
            return FLOAT64_EAGER[name]
        return sigs.get(signature) if sigs else None
    return sigs.get(signature_of()) if sigs else None


@functools.lru_cache(maxsize=1)
def capture_decompositions() -> dict:
    """Decompositions capture may use for an op the compiler cannot take
    (see ``lazy/decompose.py``): our CAPTURE-scope registrations
    (``registry.build_table``) over PyTorch's (``torch._decomp``, which
    includes ``torch._refs``)."""
    from torch._decomp import decomposition_table as torch_table
    table = dict(torch_table)
    table.update(build_table(CAPTURE))
    return table
