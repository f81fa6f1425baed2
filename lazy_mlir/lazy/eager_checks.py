"""The argument checks eager's CPU kernels make and meta kernels do not.

A meta kernel checks shapes and promotes dtypes, but the dtype checks of a
pointwise op live in its CPU kernel: ``bool_t - False`` ("Subtraction ...
with two bool tensors"), ``float_t & 3`` ("not implemented for 'Float'"),
``int_t.remainder_(0)`` (ZeroDivisionError), ``int_t.pow_(-1)``,
``bool_t.mul_(3)`` ("result type Long can't be cast"). Given a Python number
the meta kernel sees none of them, so the lazy device computed a value where
eager raises. ``probe`` runs the op once on one-element CPU tensors of the
same dtypes (ones: no division by a zero the real data may not hold) the
first time a signature is seen (``shapes.infer``'s memo keeps the answer),
and raises what eager raises. Probed: pointwise ops, reductions and scans
(``cumsum(bool_t, 0, out=bool_t)``: "not implemented for 'Bool'"; a dim of
a one-element operand of the same rank is a dim of any); where eager's result
dtype is not the meta kernel's (``pow(bool_t, True)`` is bool in eager, int64
in its meta kernel) the op runs eagerly (``EagerDtype``). A number lifted to
a 0-dim tensor (``scalars.lift_scalars``) changes the op (``lerp.Scalar`` of
integers raises, ``lerp.Tensor`` with a float weight computes): the call as
the user made it is probed too (``probe_call``).
"""
from __future__ import annotations

import warnings

import torch

aten = torch.ops.aten

# Not tagged pointwise, and checked as pointwise ops are: broadcasting
# operands, or products whose shapes one-element operands of the same ranks
# also satisfy (their meta kernels do not compare dtypes: uint8 @ int32
# computed where eager raises "expected m1 and m2 to have the same dtype";
# fuzzer seed 237).
_ALSO_POINTWISE = frozenset({aten.floor_divide.default, aten.floor_divide.Scalar,
                             aten.floor_divide_.Tensor, aten.floor_divide_.Scalar,
                             aten.rsub.Tensor, aten.rsub.Scalar, aten.mm.default,
                             aten.bmm.default, aten.addmm.default, aten.baddbmm.default,
                             aten.mv.default, aten.dot.default, aten.addmv.default})
# Scans: their dim is a dim of a one-element operand of the same rank too.
_SCANS = frozenset({"cumsum", "cumsum_", "cumprod", "cumprod_", "logcumsumexp", "cummax",
                    "cummin", "_logcumsumexp"})
# What the CPU lacks but other targets compute: not eager's verdict on the op.
_CPU_GAPS = ("'Half'", "'BFloat16'", "'ComplexHalf'", "Float8")


def _probed(func) -> bool:
    try:
        return func._lazy_mlir_probed
    except AttributeError:
        tags = func.tags
        probed = (torch.Tag.pointwise in tags or torch.Tag.reduction in tags
                  or func in _ALSO_POINTWISE or func.__name__.split(".")[0] in _SCANS)
        try:
            func._lazy_mlir_probed = probed
        except (AttributeError, TypeError):
            pass
        return probed


class EagerDtype(NotImplementedError):
    """Eager's result dtype is not the meta kernel's: the op runs eagerly
    (``dispatch`` runs an op whose shape inference raises this on the CPU)."""


def probe(func, metas: list, is_tensor, unflatten, out=None) -> None:
    """Raise what eager raises for ``func`` on these dtypes and constants.

    ``metas`` are the flat arguments with meta tensors for the lazy ones
    (``is_tensor(a)`` tells them); ``unflatten(flat)`` gives (args, kwargs).
    Only pointwise ops, reductions and scans are probed: one-element operands
    of the same ranks stand for any. ``out``: the meta kernel's result, whose
    dtypes eager's must be (``EagerDtype`` otherwise).
    """
    if not _probed(func):
        return
    try:
        got = _run_on_ones(func, metas, is_tensor, unflatten, {})
    except RuntimeError as e:  # (NotImplementedError too: "not implemented for 'Float'")
        if not any(gap in str(e) for gap in _CPU_GAPS):
            raise
        try:  # a CPU gap, or refused for floats of any width (bf16 & 3)?
            _run_on_ones(func, metas, is_tensor, unflatten, _AS_FLOAT32)
        except RuntimeError:
            raise e from None
        return
    if out is not None and _dtypes(got) != _dtypes(out):
        raise EagerDtype(f"lazy-mlir: {func} gives {_dtypes(got)} in eager, "
                         f"{_dtypes(out)} in its meta kernel")


def probe_call(func, args, kwargs, flatten, unflatten) -> None:
    """``probe`` of a call as the user made it (lazy tensors in ``args``),
    before a number in it was lifted to a tensor."""
    flat, tree = flatten(args, kwargs)
    probe(func, flat, lambda a: isinstance(a, torch.Tensor), lambda f: unflatten(f, tree))


def _dtypes(out) -> list:
    flat = out if isinstance(out, (list, tuple)) else [out]
    return [o.dtype for o in flat if isinstance(o, torch.Tensor)]


_AS_FLOAT32 = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


# A variance of one element warns "degrees of freedom is <= 0" from C++, and
# an op called as ``func(...)`` hands its warnings to the user's call, past
# ``catch_warnings``: they are probed on two elements a dim.
_TWO_A_DIM = frozenset({"std", "var", "std_mean", "var_mean"})


def _run_on_ones(func, metas, is_tensor, unflatten, dtypes: dict) -> None:
    # (host tensors too: a device mismatch is the dispatcher's error to raise)
    n = 2 if func.__name__.split(".")[0] in _TWO_A_DIM else 1
    flat = [torch.ones((n,) * a.dim(), dtype=dtypes.get(a.dtype, a.dtype))
            if is_tensor(a) or isinstance(a, torch.Tensor) else a for a in metas]
    args, kwargs = unflatten(flat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return func(*args, **kwargs)


__all__ = ["EagerDtype", "probe", "probe_call"]
