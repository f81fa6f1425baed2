"""Which Python scalars become graph inputs instead of constants.

As in PyTorch's lazy core, scalars other than 0 and 1 are lifted to 0-dim
graph inputs, so a learning rate or a bias correction that changes every step
does not change the graph. A scalar can only be lifted where the op takes a
tensor in its place: a ``Tensor`` argument given a number, a ``.Scalar``
overload with a ``.Tensor`` sibling, or an op rewritten here (``alpha`` of
add/sub, ``value`` of addcmul/addcdiv). Any other scalar stays a constant and
is part of the graph's key.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from ..ops.half_opmath import NARROW, addc_in_float32

aten = torch.ops.aten
_SPECIAL = (0, 1)
_ADDCMUL_DTYPES = (torch.float32, torch.float64)
_NUMBER_TYPES = (int, float)


def _liftable(x) -> bool:
    return type(x) in _NUMBER_TYPES and x not in _SPECIAL


@functools.lru_cache(maxsize=None)
def _scalar_dtype(dtype: torch.dtype, zero_dim: bool, scalar_type: type) -> torch.dtype:
    probe = torch.empty(() if zero_dim else (1,), dtype=dtype, device="meta")
    return torch.result_type(probe, scalar_type(2))


# Ops whose ``.Scalar`` overload is lifted to its ``.Tensor`` sibling. Not
# ``pow``: an exponent is structure (x**2 is a multiply), and a tensor
# exponent turns x**2 of a negative x into NaN in exp(2*log(x)) lowerings.
_SIBLING_OPS = {"add", "sub", "mul", "div", "rsub", "eq", "ne", "lt", "le", "gt", "ge", "fill",
                "fill_", "masked_fill", "lerp", "where", "remainder", "fmod", "floor_divide",
                "true_divide", "maximum", "minimum", "bitwise_and", "bitwise_or", "bitwise_xor",
                "copysign", "atan2", "hypot", "xlogy", "index_fill", "index_fill_"}


@functools.lru_cache(maxsize=None)
def _tensor_sibling(func):
    """``gt.Scalar`` -> ``gt.Tensor`` when their argument names agree."""
    name = func.__name__.split(".")[0]
    if not func._overloadname.endswith("Scalar") or name not in _SIBLING_OPS:
        return None
    packet = getattr(aten, name)
    name = func._overloadname[: -len("Scalar")] + "Tensor"
    if name not in packet.overloads():
        return None
    sib = getattr(packet, name)
    # The same names, each positional in both or keyword-only in both
    # (``rsub.Scalar`` takes ``alpha`` positionally, ``rsub.Tensor`` not)
    if [(a.name, a.kwarg_only) for a in sib._schema.arguments] != \
            [(a.name, a.kwarg_only) for a in func._schema.arguments]:
        return None
    return sib


def lift_scalars(func, args, kwargs, tensor_cls, make_scalar, record=None):
    """Rewrite a call so that liftable scalars are 0-dim lazy tensors.

    ``make_scalar(value, dtype)`` makes the graph input. Returns the call to
    record as (func, args, kwargs); may record helper ops itself, with
    ``record(func, args, kwargs)`` (the capture's, called directly: calling
    the op would go through PyTorch's dispatcher back into capture).
    """
    for a in args:
        if type(a) in _NUMBER_TYPES:
            break
    else:
        for a in kwargs.values():
            if type(a) in _NUMBER_TYPES:
                break
        else:
            return func, args, kwargs  # the common case: nothing to lift
    try:
        rule = func._lazy_mlir_lift
    except AttributeError:
        rule = _lift_rule(func)
    if rule[2] and _rewrites(func.__name__, args, kwargs):
        return _lift_rewritten(func, args, kwargs, tensor_cls, make_scalar, record)
    # The general rule, from the positions kept on the op (most ops given a
    # number, a dim or a flag, lift nothing): no schema read, no closure.
    new_args = None
    to_sibling = False
    n = len(args)
    for i, is_number in rule[0]:
        if i >= n:
            break
        a = args[i]
        t = type(a)
        # (a 0 or 1 stays a constant, but not as an op's self: a decomposition
        # of add.Tensor(1, x), torch.add(1, x), reads its self's dtype)
        if t in _NUMBER_TYPES and (a not in _SPECIAL or i == 0 and not is_number):
            if new_args is None:
                for ref in args:
                    if isinstance(ref, tensor_cls):
                        break
                else:
                    return func, args, kwargs
                dtype, zero_dim = ref.dtype, ref.dim() == 0
                new_args = list(args)
            lifted = _scalar_dtype(dtype, zero_dim, t)
            if lifted in _BYTES and t is int and not _fits(a, lifted):
                continue  # (eager wraps it, ``uint8_x > 300``; so does the import: a number)
            new_args[i] = make_scalar(a, lifted)
            to_sibling = to_sibling or is_number
    if new_args is None:
        return func, args, kwargs
    return (rule[1] if to_sibling else func), tuple(new_args), kwargs


def _rewrites(name, args, kwargs) -> bool:
    """Whether ``_lift_rewritten``'s rules by name apply to this call."""
    if name in ("add.Tensor", "sub.Tensor"):
        return _liftable(kwargs.get("alpha"))
    if name in ("addcmul.default", "addcdiv.default"):
        return _liftable(kwargs.get("value"))
    if name == "clamp.default":
        return any(_liftable(a) for a in (*args[1:], *kwargs.values()))
    if name in _FILLS:
        at = _FILLS[name]
        return len(args) > at and _liftable(args[at]) \
            and _fits(args[at], kwargs.get("dtype") or args[0].dtype)
    if name in _ELEMENTWISE:
        return args[0].dtype.is_floating_point and \
            any(_liftable(a) for a in (*args[1:], *kwargs.values()))
    if name in _OPMATH_SCALAR:
        return len(args) == 2 and getattr(args[0], "dtype", None) in NARROW \
            and _liftable(args[1])
    if name == "rsub.Scalar":
        return _liftable(args[1]) and _fits(args[1], _scalar_dtype(
            args[0].dtype, args[0].dim() == 0, type(args[1])))
    return False


_BYTES = (torch.uint8, torch.int8)


def _fits(x, dtype) -> bool:
    """Whether a 0-d tensor of ``dtype`` holds ``x`` (``300 - uint8_x``
    wraps in eager's kernel; a uint8 input of 300 cannot be made)."""
    if dtype.is_floating_point or dtype.is_complex:
        return True
    if dtype == torch.bool:
        return False
    info = torch.iinfo(dtype)
    return info.min <= x <= info.max


def _promoted(args, record) -> tuple:
    """addcmul's/addcdiv's ``tensor1``, ``tensor2`` in the dtype of the
    result, as eager multiplies them: int16 factors of a bfloat16 ``self``
    were multiplied in int16 first, wrapping (fuzzer seed 700012, silent)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
    dtype = elementwise_dtypes(
        *args[:3], type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    return tuple(t if t.dtype == dtype else record(aten._to_copy.default, (t,), {"dtype": dtype})
                 for t in args[1:3])


def _lift_rewritten(func, args, kwargs, tensor_cls, make_scalar, record):
    """``lift_scalars`` for a call ``_rewrites`` says is rewritten by name."""
    if record is None:
        def record(f, a, k):
            return f(*a, **k)
    ref = next((a for a in args if isinstance(a, tensor_cls)), None)
    if ref is None:
        return func, args, kwargs

    def lift(x):
        dt = _scalar_dtype(ref.dtype, ref.dim() == 0, type(x))
        return make_scalar(x, dt)

    name = func.__name__
    # In float32 and float64, a + alpha * b and a + value * (t1 op t2) are
    # recorded as ``addcmul`` with the lifted number as its second factor:
    # one node (two for addcmul/addcdiv) where mul and add took two (three),
    # and every optimizer's update has one. Same values: the same products in
    # the same order. (In float16 and bfloat16 addcmul's decomposition would
    # compute in float32 and round once, unlike the two ops.)
    if name in ("add.Tensor", "sub.Tensor") and _liftable(kwargs.get("alpha")):
        # (either side may be a number: torch.add(0.3333, t, alpha=0.6667),
        # PhiMoE's router; its self, left a number, broke addcmul's schema)
        this, other = (a if isinstance(a, tensor_cls) else lift(a) for a in args[:2])
        if name == "add.Tensor" and ref.dtype in _ADDCMUL_DTYPES:
            return aten.addcmul.default, (this, other, lift(kwargs["alpha"])), {}
        other = record(aten.mul.Tensor, (other, lift(kwargs["alpha"])), {})
        return func, (this, other), {}
    if name in ("addcmul.default", "addcdiv.default") and _liftable(kwargs.get("value")):
        t1, t2 = _promoted(args, record)
        if t1.dtype in NARROW and args[0].dtype == t1.dtype:  # (eager's float32 opmath)
            value = make_scalar(kwargs["value"], torch.float32)
            return aten.alias.default, (addc_in_float32(name[:7], args[0], t1, t2, value,
                                                        record),), {}
        inner = record(aten.mul.Tensor if "addcmul" in name else aten.div.Tensor, (t1, t2), {})
        if ref.dtype in _ADDCMUL_DTYPES:
            return aten.addcmul.default, (args[0], inner, lift(kwargs["value"])), {}
        return aten.add.Tensor, (args[0], record(aten.mul.Tensor,
                                                 (inner, lift(kwargs["value"])), {})), {}
    if name in _FILLS:
        # x.new_full(size, t), full_like(x, t): a sampling loop's timestep
        # (torch.full is fill_ of an empty tensor already: lifted as fill_)
        empty = record(aten.new_empty.default if name == "new_full.default"
                       else aten.empty_like.default, args[:_FILLS[name]], kwargs)
        return aten.fill.Tensor, (empty, make_scalar(args[_FILLS[name]], empty.dtype)), {}
    if name == "rsub.Scalar":  # (rsub.Tensor takes alpha by keyword only)
        alpha = {"alpha": args[2]} if len(args) > 2 else kwargs
        return aten.rsub.Tensor, (args[0], lift(args[1])), alpha
    if name in _ELEMENTWISE:
        return _ELEMENTWISE[name](args, kwargs, lift, record, make_scalar)
    if name in _OPMATH_SCALAR:
        x, number = _opmath(args[0], make_scalar, record)
        return _narrowed(record(_OPMATH_SCALAR[name], (x, number(args[1])), {}), args[0], record)
    # clamp: clamp.Tensor takes no numbers, so a 0 or 1 bound is lifted too.
    bounds = [lift(a) if type(a) in _NUMBER_TYPES else a for a in args[1:]]
    kwargs = {k: lift(a) if type(a) in _NUMBER_TYPES else a for k, a in kwargs.items()}
    return aten.clamp.Tensor, (args[0], *bounds), kwargs


# Fills of a new tensor whose value ``lift_scalars`` lifts: op -> its position.
_FILLS = {"new_full.default": 2, "full_like.default": 1}



# Float activations and fills whose numbers (a slope, bounds, a threshold, a
# fill) are lifted by recording them as the ops eager's kernels compute, in
# the same order (bit for bit): ``x > 0 ? x : x * slope`` for leaky_relu,
# clamp for hardtanh (ATen's hardtanh is clamp), ``x <= t ? v : x`` for
# threshold. A number each step (a schedule's slope) was a compile each step.
def _leaky_relu(args, kwargs, lift, record, make_scalar):
    """In float16 and bfloat16 eager multiplies in float32 (its opmath) and
    rounds once: the slope is not rounded to ``x``'s dtype first."""
    x = args[0]
    slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
    if x.dtype in (torch.float16, torch.bfloat16):
        wide = record(aten._to_copy.default, (x,), {"dtype": torch.float32})
        scaled = record(aten.mul.Tensor, (wide, make_scalar(slope, torch.float32)), {})
        scaled = record(aten._to_copy.default, (scaled,), {"dtype": x.dtype})
    else:
        scaled = record(aten.mul.Tensor, (x, lift(slope)), {})
    return aten.where.self, (record(aten.gt.Scalar, (x, 0), {}), x, scaled), {}


def _hardtanh(args, kwargs, lift, record, _make_scalar):
    low = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
    high = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    return aten.clamp.Tensor, (args[0], lift(low), lift(high)), {}


def _threshold(args, kwargs, lift, record, _make_scalar):
    below = record(aten.le.Tensor, (args[0], lift(args[1])), {})
    return aten.where.self, (below, lift(args[2]), args[0]), {}


def _nan_to_num(args, kwargs, lift, record, _make_scalar):
    """``isnan ? nan : x == inf ? posinf : x == -inf ? neginf : x``, a None
    fill the dtype's largest (smallest) finite value, as eager."""
    x = args[0]
    given = dict(zip(("nan", "posinf", "neginf"), args[1:]), **kwargs)
    info = torch.finfo(x.dtype)
    nan, posinf, neginf = (lift(d if given.get(k) is None else given[k])
                           for k, d in (("nan", 0.0), ("posinf", info.max), ("neginf", info.min)))
    out = record(aten.where.self, (record(aten.eq.Scalar, (x, float("-inf")), {}), neginf, x), {})
    out = record(aten.where.self, (record(aten.eq.Scalar, (x, float("inf")), {}), posinf, out), {})
    return aten.where.self, (record(aten.isnan.default, (x,), {}), nan, out), {}


def _scatter_value(args, kwargs, lift, record, _make_scalar):
    """scatter of a number: of that number broadcast to ``index``'s shape."""
    x, dim, index, value = args[:4]
    src = record(aten.expand.default, (lift(value), list(index.shape)), {})
    return aten.scatter.src, (x, dim, index, src), kwargs


def _opmath(x, make_scalar, record):
    """``x`` and a number as eager's kernels compute with them: float16 and
    bfloat16 in float32 (rounded once at the end, by ``_narrowed``)."""
    if x.dtype in (torch.float16, torch.bfloat16):
        return record(aten._to_copy.default, (x,), {"dtype": torch.float32}), \
            lambda n: make_scalar(n, torch.float32)
    return x, lambda n: make_scalar(n, x.dtype)


def _narrowed(result, x, record):
    if result.dtype == x.dtype:
        return aten.alias.default, (result,), {}
    return aten._to_copy.default, (result,), {"dtype": x.dtype}


def _softplus(args, kwargs, lift, record, make_scalar):
    """``x * beta > threshold ? x : log1p(exp(x * beta)) / beta``."""
    beta = args[1] if len(args) > 1 else kwargs.get("beta", 1.0)
    threshold = args[2] if len(args) > 2 else kwargs.get("threshold", 20.0)
    x, number = _opmath(args[0], make_scalar, record)
    scaled = record(aten.mul.Tensor, (x, number(beta)), {})
    soft = record(aten.div.Tensor, (record(aten.log1p.default, (
        record(aten.exp.default, (scaled,), {}),), {}), number(beta)), {})
    above = record(aten.gt.Tensor, (scaled, number(threshold)), {})
    return _narrowed(record(aten.where.self, (above, x, soft), {}), args[0], record)


def _elu(args, kwargs, lift, record, make_scalar):
    """``x > 0 ? x * scale : expm1(x * input_scale) * (alpha * scale)``, the
    coefficient a float32 product as eager's."""
    alpha, scale, input_scale = (*args[1:], 1.0, 1.0, 1.0)[:3]
    x, number = _opmath(args[0], make_scalar, record)
    coef = alpha * scale if x.dtype == torch.float64 else float(np.float32(alpha) * np.float32(scale))
    neg = record(aten.mul.Tensor, (record(aten.expm1.default, (
        record(aten.mul.Tensor, (x, number(input_scale)), {}),), {}), number(coef)), {})
    pos = record(aten.mul.Tensor, (x, number(scale)), {})
    out = record(aten.where.self, (record(aten.gt.Scalar, (x, 0), {}), pos, neg), {})
    return _narrowed(out, args[0], record)


_ELEMENTWISE = {"softplus.default": _softplus, "elu.default": _elu,
                "leaky_relu.default": _leaky_relu, "hardtanh.default": _hardtanh,
                "threshold.default": _threshold, "nan_to_num.default": _nan_to_num,
                "scatter.value": _scatter_value}

# A float16 or bfloat16 tensor times (over) a number: eager's CPU kernels take
# the number in float32 (``original_scalar_value<opmath_t>``), multiply (divide)
# in float32 and round once. Lifted in the tensor's dtype, the number was
# rounded first: ``bf16 * 1.7`` took 1.703125, and an SGD momentum buffer's
# ``mul_(0.9)`` drifted from eager's step by step. (add and sub take the number
# rounded to the tensor's dtype, as the general rule lifts it.)
_OPMATH_SCALAR = {"mul.Tensor": aten.mul.Tensor, "mul.Scalar": aten.mul.Tensor,
                  "div.Tensor": aten.div.Tensor, "div.Scalar": aten.div.Tensor}

# Ops whose numbers ``lift_scalars`` rewrites by name (an alpha, a value, a bound).
_REWRITTEN = frozenset({"add.Tensor", "sub.Tensor", "addcmul.default", "addcdiv.default",
                        "clamp.default", "rsub.Scalar", *_FILLS, *_ELEMENTWISE, *_OPMATH_SCALAR})


def _lift_rule(func):
    """(positions, sibling, rewritten) for ``lift_scalars``, kept on the op as
    ``func._lazy_mlir_lift``: the positional arguments where the general rule
    lifts a number (a Tensor argument, or a Number one of an op with a
    ``.Tensor`` sibling), each as (index, is a Number argument: the op becomes
    its sibling); the sibling; whether the op is one of ``_REWRITTEN``.
    Kept on the op: reading the schema builds new Python objects."""
    sibling = _sibling(func)
    positions = tuple((i, is_number) for i, (is_tensor, is_number) in enumerate(_arg_kinds(func))
                      if is_tensor or (sibling is not None and is_number))
    rule = (positions, sibling, func.__name__ in _REWRITTEN)
    try:
        func._lazy_mlir_lift = rule
    except (AttributeError, TypeError):
        pass
    return rule


def _arg_kinds(func) -> tuple[tuple[bool, bool], ...]:
    """(takes a Tensor, takes a Number) for each argument of ``func``, kept
    on the op: reading ``func._schema.arguments`` builds new Python objects
    on every access, and the lift path reads it on every op given a number."""
    try:
        return func._lazy_mlir_arg_kinds
    except AttributeError:
        kinds = tuple((isinstance(a.type, torch.TensorType), isinstance(a.type, torch.NumberType))
                      for a in func._schema.arguments)
        try:
            func._lazy_mlir_arg_kinds = kinds
        except (AttributeError, TypeError):
            pass
        return kinds


def _sibling(func):
    """``_tensor_sibling``, kept on the op (an lru_cache lookup hashes the op
    in Python)."""
    try:
        return func._lazy_mlir_sibling
    except AttributeError:
        sib = _tensor_sibling(func)
        try:
            func._lazy_mlir_sibling = sib
        except (AttributeError, TypeError):
            pass
        return sib
