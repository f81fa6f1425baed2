"""``lm.autocast``: ``torch.autocast`` for the lazy device, with eager CPU
autocast's policy (PyTorch 2.13's ``AutocastCPU`` op lists).

How it works, and why this way. PyTorch's autocast is a dispatch key above
autograd (``AutocastCPU`` for CPU tensors); its kernels cast an op's
arguments, then redispatch, so autograd records the casts and gradients come
back in each input's dtype. There is no autocast key for the lazy device
(``torch._C._is_autocast_available("lazy")`` is False), and CPU's kernels
cast only CPU tensors (``is_autocast_eligible`` checks ``tensor.is_cpu()``,
the device, not the dispatch keys), so a lazy tensor passes through
``torch.autocast("cpu")`` untouched. Here the same mechanism runs on a key no
backend of this process uses, ``AutocastIPU`` (Graphcore's; PyTorch itself
registers no kernel and no fallback there): Python kernels for exactly the
ops ``AutocastCPU`` has kernels for, each with CPU's policy (cast to the
lower precision dtype, to float32, or to the widest input type), and a
fallthrough for every other op. The key is switched on by the thread's
dispatch-key state (included and not excluded), which PyTorch carries to the
autograd engine's threads like its own autocast state; nothing is added to
any tensor, and outside an ``lm.autocast`` region no op pays anything.
Casting happens on the aten op, above autograd, as in eager: composite ops
(``F.multi_head_attention_forward``, ``F.cross_entropy`` ->
``cross_entropy_loss``) are cast where eager casts them.

Guarantees: inside ``lm.autocast("lazy", dtype)`` an op on lazy tensors gets
the arguments, result dtype and autograd graph that eager CPU autocast gives
the same op on CPU tensors (``tests/e2e/test_autocast.py`` compares them op
by op); fp32 leaf parameters cast to the lower precision dtype are cast once
per outermost region (eager's weight cache); CPU tensors are left alone (as
``torch.autocast("cuda")`` leaves them). PyTorch's device list is C++
(``is_autocast_available``, ``get_autocast_dispatch_key_from_device_type``),
so its autocast API refuses ``"lazy"``. ``answer_for_lazy()`` (called when the
device is registered) makes ``torch.is_autocast_enabled("lazy")`` and
``torch.get_autocast_dtype("lazy")`` report ``lm.autocast``'s state, so code
that asks about its tensors' ``device.type`` (transformers'
``maybe_autocast(device_type, enabled=False)`` around a MoE router) runs as
on the CPU outside an ``lm.autocast`` region; ``accept_lazy_in_torch_autocast()``
makes ``torch.autocast("lazy")`` an ``lm.autocast`` (its methods wrapped for
that device type only: a ``__new__`` returning another class broke Dynamo's
tracing of every ``torch.autocast`` region).
Inside a region ``torch.is_autocast_enabled("ipu")`` reports True: the
enable bit is that key's.
"""
from __future__ import annotations

import functools
import threading
import warnings

import torch

_KEY = torch._C.DispatchKey.AutocastIPU
_KEY_NAME = "AutocastIPU"
_KEYSET = torch._C.DispatchKeySet(_KEY)
_SLOT = "ipu"  # the device type whose autocast dtype / enabled bit the key uses
_DEVICE = "lazy"
_SUPPORTED_DTYPES = (torch.bfloat16, torch.float16)  # CPU autocast's (amp/autocast_mode.py)

# PyTorch 2.13's aten/src/ATen/autocast_mode.cpp, TORCH_LIBRARY_IMPL(aten,
# AutocastCPU, m), in its order (its Dimname overloads do not exist in this
# build). tests/e2e/test_autocast.py checks that the three lists together are
# exactly the ops with an AutocastCPU kernel in the installed PyTorch.
LOWER_PRECISION_FP = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding",
    "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm", "_addmm_activation", "addbmm",
    "linear", "_convolution.deprecated", "matmul", "conv_tbc", "mkldnn_rnn_layer",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "prelu",
    "scaled_dot_product_attention", "_native_multi_head_attention",
)
FP32 = (
    "avg_pool3d", "binary_cross_entropy", "grid_sampler", "polar", "prod", "prod.dim_int",
    "quantile", "quantile.scalar", "nanquantile", "nanquantile.scalar", "stft", "stft.center",
    "cdist", "grid_sampler_2d", "_grid_sampler_2d_cpu_fallback", "grid_sampler_3d", "trace",
    "view_as_complex", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse",
    "lu_solve", "orgqr", "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d",
    "adaptive_avg_pool3d", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
    "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss",
    "nll_loss", "nll_loss2d", "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss",
    "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "ctc_loss.IntList", "ctc_loss.Tensor",
    "kl_div", "multilabel_margin_loss", "binary_cross_entropy_with_logits", "fft_fft",
    "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft",
    "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft",
    "linalg_cond", "linalg_cond.p_str", "linalg_matrix_rank", "linalg_matrix_rank.tol_tensor",
    "linalg_matrix_rank.atol_rtol_tensor", "linalg_matrix_rank.atol_rtol_float",
    "linalg_solve", "linalg_cholesky", "linalg_svdvals", "linalg_eigvals", "linalg_eigvalsh",
    "linalg_inv", "linalg_householder_product", "linalg_tensorinv", "linalg_tensorsolve",
    "fake_quantize_per_tensor_affine", "geqrf", "_lu_with_info", "qr", "svd",
    "triangular_solve", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "multilabel_margin_loss_forward", "linalg_qr",
    "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh", "linalg_lstsq",
    "linalg_inv_ex",
)
PROMOTE = ("stack", "cat", "index_copy")

_LOWER, _FP32, _PROMOTE = "lower_precision_fp", "fp32", "promote"


def policy_table() -> dict[str, str]:
    """``"aten::op[.overload]"`` -> ``"lower_precision_fp" | "fp32" | "promote"``."""
    table = {}
    for names, policy in ((LOWER_PRECISION_FP, _LOWER), (FP32, _FP32), (PROMOTE, _PROMOTE)):
        table.update(("aten::" + n, policy) for n in names)
    return table


# ---- casting (at::autocast::cached_cast and promote_type, for lazy tensors)

class _State(threading.local):
    nesting = 0  # lm.autocast regions entered on this thread


_state = _State()
# id(fp32 leaf parameter) -> (parameter, its cast): eager's weight cache. The
# parameter is held so its id cannot be reused while the entry lives; cleared
# when the outermost region of the thread that filled it exits.
_cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _eligible(t) -> bool:
    """at::autocast::is_eligible for the lazy device: a floating lazy tensor
    that is not float64 (autocast never touches doubles)."""
    return (isinstance(t, torch.Tensor) and t.device.type == _DEVICE and t.is_floating_point()
            and t.dtype is not torch.float64)


def _cast(t, to: torch.dtype, lower: torch.dtype):
    if not _eligible(t) or t.dtype is to:
        return t
    if (to is lower and t.dtype is torch.float32 and t.requires_grad and t.is_leaf
            and not t._is_view() and torch.is_autocast_cache_enabled()):
        hit = _cache.get(id(t))
        if hit is not None and hit[0] is t:
            return hit[1]
        cast = t.to(to)
        _cache[id(t)] = (t, cast)
        return cast
    return t.to(to)


def _cast_arg(a, to, lower):
    if isinstance(a, (list, tuple)):  # cat / stack take a tensor list
        return type(a)(_cast(x, to, lower) for x in a)
    return _cast(a, to, lower)


def _widest(lower: torch.dtype, args, kwargs) -> torch.dtype:
    """at::autocast::promote_type: float32 if any eligible input is float32,
    else the lower precision dtype; float64 inputs are ignored."""
    current = lower
    for a in (*args, *kwargs.values()):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if not _eligible(t):
                continue
            if current is torch.float32 or t.dtype is torch.float32:
                current = torch.float32
            elif not (current is lower and t.dtype is lower):
                raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return current


def _kernel(op, policy: str):
    """The AutocastIPU kernel of ``op``: cast the lazy arguments by
    ``policy``, then run ``op`` below this key (as autocast_mode.h's
    WrapFunction_ does, with the key excluded so it is not re-entered)."""
    def kernel(*args, **kwargs):
        lower = torch.get_autocast_dtype(_SLOT)
        if policy is _LOWER:
            to = lower
        elif policy is _FP32:
            to = torch.float32
        else:
            to = _widest(lower, args, kwargs)
        args = [_cast_arg(a, to, lower) for a in args]
        kwargs = {k: _cast_arg(v, to, lower) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(_KEYSET):
            return op(*args, **kwargs)
    kernel.__name__ = f"lazy_autocast_{policy}"
    return kernel


_libraries: list = []  # the registrations live as long as their Library objects


def _overload(qualified: str):
    name = qualified.split("::", 1)[1]
    op, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


def install() -> None:
    """Register the kernels (once, at the first ``lm.autocast``). Raises if
    another library already put kernels on the borrowed key."""
    if _libraries:
        return
    table = policy_table()
    taken = [n for n in table if torch._C._dispatch_has_kernel_for_dispatch_key(n, _KEY_NAME)]
    if taken or torch._C._dispatch_has_backend_fallback(_KEY):
        raise RuntimeError(
            f"lazy-mlir: lm.autocast runs on the {_KEY_NAME} dispatch key, which another "
            f"library in this process already uses (kernels for {taken[:3]}...); "
            "lm.autocast is not available alongside it")
    ops = torch.library.Library("aten", "IMPL")
    rest = torch.library.Library("_", "IMPL")
    for name, policy in table.items():
        ops.impl(name.split("::", 1)[1], _kernel(_overload(name), policy), _KEY_NAME)
    rest.fallback(torch.library.fallthrough_kernel, _KEY_NAME)  # every other op: next key
    _libraries.extend((ops, rest))


# ---- the context manager

class autocast:
    """``torch.autocast`` for lazy tensors: ``lm.autocast("lazy",
    dtype=torch.bfloat16)`` (the signature of ``torch.autocast``; a context
    manager and a decorator). ``dtype`` None means bfloat16 (CPU autocast's
    default); bfloat16 and float16 are supported, another dtype warns and
    disables the region, as ``torch.autocast("cpu")`` does.
    ``enabled=False`` turns lazy autocast off inside an enclosing region.
    ``cache_enabled`` as in ``torch.autocast`` (default: the current
    setting). Only lazy tensors are cast: CPU tensors inside the region keep
    their dtypes (use ``torch.autocast("cpu")`` for them; the two nest)."""

    def __init__(self, device_type: str = _DEVICE, dtype: torch.dtype | None = None,
                 enabled: bool = True, cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        if device_type != _DEVICE:
            raise RuntimeError(
                f"lm.autocast casts lazy tensors (device_type 'lazy'), not {device_type!r}: "
                f"use torch.autocast({device_type!r}) for {device_type} tensors")
        self.device = device_type
        self.fast_dtype = torch.bfloat16 if dtype is None else dtype
        self._cache_enabled = cache_enabled
        if enabled and self.fast_dtype not in _SUPPORTED_DTYPES:
            warnings.warn(
                "In LAZY autocast, but the target dtype is not supported. Disabling autocast.\n"
                "LAZY Autocast only supports dtypes of torch.bfloat16, torch.float16 currently.",
                stacklevel=2)
            enabled = False
        self._enabled = enabled

    def __enter__(self):
        install()
        self._prev = (torch._C._dispatch_tls_is_dispatch_key_excluded(_KEY),
                      torch._C._dispatch_tls_is_dispatch_key_included(_KEY),
                      torch.get_autocast_dtype(_SLOT), torch.is_autocast_cache_enabled())
        torch._C._dispatch_tls_set_dispatch_key_included(_KEY, True)
        torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, not self._enabled)
        torch.set_autocast_dtype(_SLOT, self.fast_dtype)
        if self._cache_enabled is not None:
            torch.set_autocast_cache_enabled(self._cache_enabled)
        _state.nesting += 1
        return self

    def __exit__(self, *exc) -> bool:
        excluded, included, dtype, cache_enabled = self._prev
        _state.nesting -= 1
        if _state.nesting == 0:  # casts of parameters live until the outermost region ends
            _cache.clear()
        torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, excluded)
        torch._C._dispatch_tls_set_dispatch_key_included(_KEY, included)
        torch.set_autocast_dtype(_SLOT, dtype)
        torch.set_autocast_cache_enabled(cache_enabled)
        return False

    def __call__(self, func):
        if not callable(func):
            raise TypeError(f"autocast()(func) requires a callable, got {type(func).__name__}")

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return func(*args, **kwargs)
        return wrapper


def answer_for_lazy() -> None:
    """``torch.is_autocast_enabled`` and ``torch.get_autocast_dtype`` answer
    for device type ``"lazy"`` (``lm.autocast``'s state); other device types
    reach PyTorch unchanged. Applied once."""
    if hasattr(torch.is_autocast_enabled, "__wrapped__"):
        return
    is_on, dtype_of = torch.is_autocast_enabled, torch.get_autocast_dtype

    def is_autocast_enabled(*args, **kwargs):
        if (args[0] if args else kwargs.get("device_type")) == _DEVICE:
            return is_enabled()
        return is_on(*args, **kwargs)

    def get_autocast_dtype(*args, **kwargs):
        if (args[0] if args else kwargs.get("device_type")) == _DEVICE:
            return dtype_of(_SLOT)
        return dtype_of(*args, **kwargs)

    is_autocast_enabled.__wrapped__, get_autocast_dtype.__wrapped__ = is_on, dtype_of
    # TorchScript maps PyTorch's builtins to their aten ops by identity; the
    # wrappers must map as they do (scripting nn.MultiheadAttention, which
    # asks is_autocast_enabled, tried to compile the wrapper and failed).
    from torch.jit import _builtins
    table = _builtins._get_builtin_table()  # (built with PyTorch's own first)
    for wrapper, builtin in ((is_autocast_enabled, is_on), (get_autocast_dtype, dtype_of)):
        if id(builtin) in table:
            _builtins._register_builtin(wrapper, table[id(builtin)])
    torch.is_autocast_enabled, torch.get_autocast_dtype = is_autocast_enabled, get_autocast_dtype


def accept_lazy_in_torch_autocast() -> None:
    """``torch.autocast("lazy", ...)`` is ``lm.autocast("lazy", ...)``: PyTorch's
    class keeps its identity (Dynamo recognizes autocast regions by it) and its
    behaviour for every other device type; only an instance made for ``"lazy"``
    delegates its ``__enter__`` / ``__exit__`` to an ``lm.autocast`` (PyTorch's
    own ``__init__`` refuses the device type). The wrappers carry
    ``__wrapped__`` so that TorchScript, which reads these methods' source when
    it scripts a ``with torch.autocast(...)`` region, reads PyTorch's. Applied once."""
    cls = torch.amp.autocast_mode.autocast
    if hasattr(cls.__init__, "__wrapped__"):
        return
    init, enter, exit_ = cls.__init__, cls.__enter__, cls.__exit__

    @functools.wraps(init)
    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        if device_type != _DEVICE or torch._jit_internal.is_scripting():
            return init(self, device_type, dtype, enabled, cache_enabled)
        self._lazy = autocast(device_type, dtype, enabled, cache_enabled)
        self.device, self.fast_dtype = device_type, self._lazy.fast_dtype
        self._enabled, self._cache_enabled = self._lazy._enabled, cache_enabled

    @functools.wraps(enter)
    def __enter__(self):
        if getattr(self, "_lazy", None) is None:
            return enter(self)
        self._lazy.__enter__()
        return self

    @functools.wraps(exit_)
    def __exit__(self, *exc):
        if getattr(self, "_lazy", None) is None:
            return exit_(self, *exc)
        return self._lazy.__exit__(*exc)

    cls.__init__, cls.__enter__, cls.__exit__ = __init__, __enter__, __exit__


def is_enabled() -> bool:
    """Whether ops on lazy tensors of this thread are autocast now."""
    return (torch._C._dispatch_tls_is_dispatch_key_included(_KEY)
            and not torch._C._dispatch_tls_is_dispatch_key_excluded(_KEY))


def state() -> tuple:
    """What lazy autocast does to ops recorded now on this thread, hashable:
    ``(False,)`` or ``(True, dtype)`` (part of ``compile_train_step``'s
    guard: a step recorded under autocast replays only under the same)."""
    return (True, torch.get_autocast_dtype(_SLOT)) if is_enabled() else (False,)
