"""Complex arithmetic as real arithmetic on a trailing pair (an fx pass).

Rotary position embeddings written with complex numbers (LLaMA's and
Mistral's reference code, DeepSeek V2, Llama 4: ``torch.polar`` for
``freqs_cis``, ``view_as_complex(x.reshape(..., -1, 2)) * freqs_cis``,
``view_as_real``) make complex64 tensors in the forward and, through the
backward of a complex product (``grad * other.conj()``), in the backward.
torch-mlir 20261001 lowers only some complex ops to linalg (``mul.Tensor``,
``polar``, ``view_as_real``/``view_as_complex``; not ``_conj``,
``conj_physical``, a complex ``mul.Scalar``: "Only integer/float dtype
supported"), so complex ops ran eagerly, each cutting its graph.

Here every complex value of a graph is held as a real tensor of its shape
plus a trailing dimension of 2 (real part, imaginary part): the layout of
``view_as_real``. Each op that reads or makes a complex value is rewritten by
``REWRITES`` in real ops (a product is ``(ac - bd, ad + bc)``, ``polar`` is
``(r cos t, r sin t)``, ``_conj`` negates the imaginary part, ``view_as_real``
and ``view_as_complex`` are the pair itself, a shape op is the same op with
the trailing dimension kept); every other op is left as it is. At the
module's boundary, where complex tensors cross graphs (a cached
``freqs_cis`` buffer, a complex value live at ``mark_step``), the arguments
and results stay complex64 and meet the pairs through ``view_as_real`` and
``view_as_complex``, two ops torch-mlir and IREE lower (as a bitcast): the
runtime passes complex64 buffers as they are.

``handles(op)`` says which ops capture may record on complex tensors (the
rest run eagerly, counted as fallbacks); a complex op this pass does not know
(a view of one, made when a view is materialized) raises a
``PipelineError`` blaming it, and the graph runs eagerly.
"""
from __future__ import annotations

import operator

import torch
import torch.fx as fx

from ..dialects.runner import PipelineError
from ..ops import offsets as _offsets  # noqa: F401 - defines lazy_mlir::slice_at, ...
from . import dft

aten = torch.ops.aten
at_offset = torch.ops.lazy_mlir

TAKEN = (torch.complex64,)
"""Complex dtypes the pass rewrites (complex128 would need float64 pairs,
which the float64-demoting targets lower differently: left eager)."""


class Pair:
    """A complex tensor held as a real one with a trailing dimension of 2."""

    __slots__ = ("t", "_parts")

    def __init__(self, t):
        self.t = t
        self._parts = None

    def _split(self):
        if self._parts is None:
            self._parts = (aten.select.int(self.t, -1, 0), aten.select.int(self.t, -1, 1))
        return self._parts

    @property
    def re(self):
        return self._split()[0]

    @property
    def im(self):
        return self._split()[1]

    @property
    def ndim(self) -> int:  # the complex tensor's rank
        return self.t.dim() - 1


def _pair(re, im) -> Pair:
    """The pair of two real tensors (broadcast to one shape)."""
    re, im = aten.broadcast_tensors.default([re, im])
    return Pair(aten.stack.default([re, im], -1))


def _as_pair(x, like: Pair) -> Pair:
    """``x`` (a pair, a real tensor or a real number) as a pair."""
    if isinstance(x, Pair):
        return x
    zero = aten.zeros_like.default(like.re)
    if isinstance(x, torch.Tensor):
        return _pair(x.to(like.t.dtype), zero)
    return _pair(aten.add.Scalar(zero, x), zero)


def _scaled(tensor_op, scalar_op, p: Pair, r) -> Pair:
    """``p`` times or divided by a real ``r`` (a trailing unit dimension
    broadcasts a tensor against the pair)."""
    if isinstance(r, torch.Tensor):
        return Pair(tensor_op(p.t, aten.unsqueeze.default(r, -1)))
    return Pair(scalar_op(p.t, r))


def _dim(d: int, ndim: int) -> int:
    """A complex tensor's dimension ``d`` (negative counts from its last).
    A 0-d tensor's dimension 0 (which ops take as a dimension of size 1) has
    no counterpart in its pair: refused (the graph runs eagerly)."""
    if ndim == 0:
        raise ValueError("a dimension of a 0-d complex tensor")
    return d % ndim


# ------------------------------------------------------------ arithmetic
def _mul(a, b):
    if isinstance(a, Pair) and isinstance(b, Pair):
        return _pair(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re)
    p, r = (a, b) if isinstance(a, Pair) else (b, a)
    return _scaled(aten.mul.Tensor, aten.mul.Scalar, p, r)


def _div(a, b):
    """A quotient by a pair as c10::complex divides (Smith's algorithm: by
    the ratio of the smaller part to the larger, so that no square
    overflows; a zero divisor gives eager's infinities and NaNs)."""
    if not isinstance(b, Pair):
        return _scaled(aten.div.Tensor, aten.div.Scalar, a, b)
    a = _as_pair(a, b)
    c, d = b.re, b.im
    abs_c, abs_d = aten.abs.default(c), aten.abs.default(d)
    rat1 = d / c  # |c| >= |d|
    scl1 = aten.reciprocal.default(c + d * rat1)
    rat2 = c / d  # |c| < |d|
    scl2 = aten.reciprocal.default(d + c * rat2)
    first = aten.ge.Tensor(abs_c, abs_d)
    re = aten.where.self(first, (a.re + a.im * rat1) * scl1, (a.re * rat2 + a.im) * scl2)
    im = aten.where.self(first, (a.im - a.re * rat1) * scl1, (a.im * rat2 - a.re) * scl2)
    zero = aten.logical_and.default(abs_c == 0, abs_d == 0)
    return _pair(aten.where.self(zero, a.re / abs_c, re), aten.where.self(zero, a.im / abs_d, im))


def _add(a, b, alpha=1):
    """``a + alpha * b``; a real operand is a pair with no imaginary part."""
    like = a if isinstance(a, Pair) else b
    return Pair(aten.add.Tensor(_as_pair(a, like).t, _as_pair(b, like).t, alpha=alpha))


def _sub(a, b, alpha=1):
    return _add(a, b, alpha=-alpha)


def _rsub(a, b, alpha=1):
    return _add(b, a, alpha=-alpha)


def _conj(p):
    return _pair(p.re, aten.neg.default(p.im))


def _same(p, *args, **kwargs):
    """Ops whose value is their input's (a resolved conjugate bit, an alias)."""
    return Pair(p.t)


def _clone(p, memory_format=None):
    return Pair(aten.clone.default(p.t, memory_format=torch.contiguous_format))


def _copy(dst, src, non_blocking=False):
    """``aten.copy`` (a functionalized ``copy_``): ``src`` in ``dst``'s
    shape and dtype (into a real ``dst``, its real part)."""
    if not isinstance(dst, Pair):
        return aten.expand.default(src.re.to(dst.dtype), list(dst.shape)).clone()
    src = _as_pair(src, dst)
    return Pair(aten.expand.default(src.t.to(dst.t.dtype), list(dst.t.shape)).clone())


def _to_copy(x, dtype=None, **_):
    """A cast: complex to complex (the pair's precision), complex to real
    (the real part, as eager, which warns), real to complex (a zero imaginary part)."""
    if not isinstance(x, Pair):
        real = _REAL_OF[dtype]
        return _pair(x.to(real), aten.zeros_like.default(x, dtype=real))
    if dtype is None or dtype.is_complex:
        return Pair(aten.clone.default(x.t.to(_REAL_OF.get(dtype, x.t.dtype))))
    return aten.clone.default(x.re.to(dtype))


def _polar(r, theta):
    return _pair(r * aten.cos.default(theta), r * aten.sin.default(theta))


def _exp(p):
    m = aten.exp.default(p.re)
    return _pair(m * aten.cos.default(p.im), m * aten.sin.default(p.im))


def _abs(p):
    """hypot(re, im) without overflow: the larger part times sqrt(1 + q^2),
    an infinite part infinite (as C's hypot, what eager calls)."""
    a, b = aten.abs.default(p.re), aten.abs.default(p.im)
    big, small = aten.maximum.default(a, b), aten.minimum.default(a, b)
    q = small / aten.where.ScalarSelf(big == 0, 1.0, big)
    out = big * aten.sqrt.default(q * q + 1)
    return aten.where.self(aten.isinf.default(big), big, out)


def _sgn(p):
    """``z / |z|``, 0 where ``z`` is 0 (the backward of ``abs``)."""
    m = _abs(p)
    safe = aten.where.ScalarSelf(m == 0, 1.0, m)
    return _pair(p.re / safe, p.im / safe)


def _where(cond, a, b):
    like = a if isinstance(a, Pair) else b
    return Pair(aten.where.self(aten.unsqueeze.default(cond, -1), _as_pair(a, like).t,
                                _as_pair(b, like).t))


def _sum(p, dim=None, keepdim=False, dtype=None):
    """Over ``dim`` of the complex tensor (none or empty: all of them)."""
    dims = list(range(p.ndim)) if not dim else [_dim(d, p.ndim) for d in dim]
    out = aten.sum.dim_IntList(p.t, dims, keepdim) if dims else aten.clone.default(p.t)
    return Pair(out.to(_REAL_OF[dtype]) if dtype is not None else out)


def _sum_all(p, dtype=None):
    return _sum(p, None, False, dtype)


# ------------------------------------------------------------ shapes
def _squeeze(p, dim=None):
    if dim is None:
        dims = [d for d in range(p.ndim) if p.t.shape[d] == 1]
    else:
        dims = [_dim(d, p.ndim) for d in ([dim] if isinstance(dim, int) else dim)]
    return Pair(aten.squeeze.dims(p.t, dims))


def _on_dim(op, rank=0):
    """``op(pair, dim, *rest)`` with ``dim`` a dimension of the complex
    tensor (``rank``: 1 where the op adds one, as unsqueeze and stack)."""
    def rewrite(p, dim=0, *rest, **kwargs):
        return Pair(op(p.t, _dim(dim, p.ndim + rank), *rest, **kwargs))
    return rewrite


def _list_on_dim(op, rank=0):
    """``op([pairs], dim)`` (cat, stack): real members become pairs."""
    def rewrite(xs, dim=0):
        like = next(x for x in xs if isinstance(x, Pair))
        return Pair(op([_as_pair(x, like).t for x in xs], _dim(dim, like.ndim + rank)))
    return rewrite


def _split(op):
    def rewrite(p, sizes, dim=0):
        return [Pair(t) for t in op(p.t, sizes, _dim(dim, p.ndim))]
    return rewrite


def _unbind(p, dim=0):
    return [Pair(t) for t in aten.unbind.int(p.t, _dim(dim, p.ndim))]


def _scatter(op):
    """``slice_scatter``/``select_scatter``: the written part as a pair too."""
    def rewrite(base, src, dim=0, *rest, **kwargs):
        return Pair(op(base.t, _as_pair(src, base).t, _dim(dim, base.ndim), *rest, **kwargs))
    return rewrite


def _transpose(p, a, b):
    return Pair(aten.transpose.int(p.t, _dim(a, p.ndim), _dim(b, p.ndim)))


def _permute(p, dims):
    return Pair(aten.permute.default(p.t, [_dim(d, p.ndim) for d in dims] + [p.ndim]))


def _t(p):
    return Pair(aten.transpose.int(p.t, 0, 1)) if p.ndim == 2 else Pair(p.t)


def _shaped(op):
    """view/reshape/expand: the size with the pair's dimension appended."""
    def rewrite(p, size, *rest, **kwargs):
        return Pair(op(p.t, list(size) + [2], *rest, **kwargs))
    return rewrite


def _like(op):
    """zeros_like/ones_like of or into a complex dtype: ones are (1, 0)."""
    def rewrite(x, dtype=None, **_):
        base = x.re if isinstance(x, Pair) else x
        if not (dtype.is_complex if dtype is not None else isinstance(x, Pair)):
            return op(base, dtype=dtype)
        real = _REAL_OF[dtype] if dtype is not None else base.dtype
        return _pair(op(base, dtype=real), aten.zeros_like.default(base, dtype=real))
    return rewrite


def _zeros(size, dtype=None, **kwargs):
    """A complex ``zeros``/``new_zeros`` (the one-sided FFT's backward pads
    its gradient with one): zero pairs."""
    real = _REAL_OF[dtype if dtype is not None and dtype.is_complex else torch.complex64]
    kwargs.pop("layout", None)
    return Pair(aten.zeros.default(list(size) + [2], dtype=real, **kwargs))


REWRITES = {
    aten.mul.Tensor: _mul, aten.mul.Scalar: _mul,
    aten.div.Tensor: _div, aten.div.Scalar: _div,
    aten.add.Tensor: _add, aten.add.Scalar: _add,
    aten.sub.Tensor: _sub, aten.sub.Scalar: _sub,
    aten.rsub.Tensor: _rsub, aten.rsub.Scalar: _rsub,
    aten.reciprocal.default: lambda p: _div(1.0, p),
    aten.neg.default: lambda p: Pair(aten.neg.default(p.t)),
    aten._conj.default: _conj, aten.conj_physical.default: _conj,
    aten._conj_physical.default: _conj,
    aten.resolve_conj.default: _same, aten.resolve_neg.default: _same,
    aten.alias.default: _same, aten.lift_fresh_copy.default: _clone,
    aten.clone.default: _clone, aten.copy.default: _copy, aten._to_copy.default: _to_copy,
    aten.view_as_real.default: lambda p: p.t,
    aten.view_as_complex.default: lambda x: Pair(x),
    aten.polar.default: _polar, aten.complex.default: _pair,
    aten.real.default: lambda p: p.re, aten.imag.default: lambda p: p.im,
    aten.abs.default: _abs, aten.sgn.default: _sgn, aten.angle.default: lambda p: aten.atan2.default(p.im, p.re),
    aten.exp.default: _exp, aten.where.self: _where,
    aten.sum.dim_IntList: _sum, aten.sum.default: _sum_all,
    aten.view.default: _shaped(aten.view.default),
    aten._unsafe_view.default: _shaped(aten._unsafe_view.default),
    aten.reshape.default: _shaped(aten.reshape.default),
    aten.expand.default: _shaped(aten.expand.default),
    aten.permute.default: _permute, aten.transpose.int: _transpose, aten.t.default: _t,
    aten.unsqueeze.default: _on_dim(aten.unsqueeze.default, rank=1),
    aten.squeeze.default: _squeeze, aten.squeeze.dim: _squeeze, aten.squeeze.dims: _squeeze,
    aten.slice.Tensor: _on_dim(aten.slice.Tensor), aten.select.int: _on_dim(aten.select.int),
    aten.index_select.default: _on_dim(aten.index_select.default),
    aten.flip.default: lambda p, dims: Pair(aten.flip.default(
        p.t, [_dim(d, p.ndim) for d in dims])),
    aten.split.Tensor: _split(aten.split.Tensor),
    aten.split_with_sizes.default: _split(aten.split_with_sizes.default),
    aten.unbind.int: _unbind,
    aten.cat.default: _list_on_dim(aten.cat.default),
    aten.stack.default: _list_on_dim(aten.stack.default, rank=1),
    aten.slice_scatter.default: _scatter(aten.slice_scatter.default),
    aten.select_scatter.default: _scatter(aten.select_scatter.default),
    aten.repeat.default: lambda p, sizes: Pair(aten.repeat.default(p.t, list(sizes) + [1])),
    # slices at a runtime offset (``ops/offsets.py``)
    at_offset.slice_at.default: _on_dim(at_offset.slice_at.default),
    at_offset.select_at.default: _on_dim(at_offset.select_at.default),
    at_offset.slice_scatter_at.default: _scatter(at_offset.slice_scatter_at.default),
    at_offset.select_scatter_at.default: _scatter(at_offset.select_scatter_at.default),
    aten.zeros_like.default: _like(aten.zeros_like.default),
    aten.zeros.default: _zeros,
    aten.new_zeros.default: lambda x, size, dtype=None, **kw: _zeros(
        size, dtype if dtype is not None else torch.complex64, **kw),
    # torch.fft's primitives as DFT matrix products (``dft.py``)
    aten._fft_c2c.default: lambda p, dim, norm, forward: _pair(*dft.c2c(
        p.re, p.im, dim, norm, forward)),
    aten._fft_r2c.default: lambda x, dim, norm, onesided: _pair(*dft.r2c(
        x, dim, norm, onesided)),
    aten._fft_c2r.default: lambda p, dim, norm, n: dft.c2r(p.re, p.im, dim, norm, n),
    aten.ones_like.default: _like(aten.ones_like.default),
}

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64,
            None: None, torch.float32: torch.float32, torch.float64: torch.float64}


FROM_REAL = {aten._fft_r2c.default, aten.zeros.default}
"""Rewritten ops that make a complex value from real arguments only."""


def handles(op) -> bool:
    """Whether capture may record ``op`` on complex tensors: this pass
    writes it in real arithmetic."""
    return op in REWRITES


def _complex(val) -> bool:
    if isinstance(val, (list, tuple)):
        return any(_complex(v) for v in val)
    return isinstance(val, torch.Tensor) and val.dtype.is_complex


def has_complex(gm: fx.GraphModule) -> bool:
    return any(_complex(n.meta.get("val")) for n in gm.graph.nodes)


class _AsReal(fx.Interpreter):
    """Runs ``gm`` (under ``make_fx``) with each complex value held as its pair."""

    def run_node(self, n: fx.Node):
        if n.op == "placeholder":
            v = super().run_node(n)
            return aten.view_as_real.default(v) if _complex(v) else v
        if n.op == "output":
            return super().run_node(n) if not any(
                _complex(a.meta.get("val")) for a in n.all_input_nodes) else self._output(n)
        touches = _complex(n.meta.get("val")) or any(
            _complex(a.meta.get("val")) for a in n.all_input_nodes)
        if n.op != "call_function" or not touches or n.target is operator.getitem:
            return super().run_node(n)
        rewrite = REWRITES.get(n.target)
        if rewrite is None:
            raise _unrewritten(n, "it has no rewrite in real arithmetic")
        args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: Pair(self.env[a])
                                       if _complex(a.meta.get("val")) else self.env[a])
        try:
            return _unwrap(rewrite(*args, **kwargs), n.meta.get("val"))
        except Exception as e:  # (arguments a rewrite does not take: the graph runs eagerly)
            raise _unrewritten(n, f"its rewrite failed ({type(e).__name__}: {e})") from e

    def _output(self, n: fx.Node):
        def boundary(a):
            v = self.env[a]
            if not _complex(a.meta.get("val")):
                return v
            if v.stride(-1) != 1 or any(s % 2 for s in v.stride()[:-1]):
                v = aten.clone.default(v, memory_format=torch.contiguous_format)
            return aten.view_as_complex.default(v)
        return fx.node.map_arg(n.args[0], boundary)


def _unrewritten(n: fx.Node, why: str) -> PipelineError:
    """The error of a complex op not rewritten, blaming it (``unlowered``)."""
    from ..ops.support import mlir_name
    return PipelineError(f"lazy-mlir: {n.target} on complex tensors is not compiled: {why} "
                         "(passes/complex_as_real.py)", None, (mlir_name(n.target),))


def _unwrap(out, val):
    """The rewrite's result as the env holds it: pairs as their real tensor,
    in the precision of the node's dtype."""
    if isinstance(out, (list, tuple)):
        return [_unwrap(o, v) for o, v in zip(out, val)]
    if isinstance(out, Pair):
        out = out.t
    want = _REAL_OF.get(val.dtype, val.dtype) if isinstance(val, torch.Tensor) else None
    return out.to(want) if want is not None and out.dtype != want else out


def complex_as_real(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` with its complex values as real pairs (``gm`` itself when it
    has none). Raises ``PipelineError`` for a complex op with no rewrite."""
    if not has_complex(gm):
        return gm
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch._subclasses.fake_tensor import FakeTensorMode
    fakes = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    mode = fakes[0].fake_mode if fakes else FakeTensorMode()
    try:
        with mode:
            return make_fx(lambda *args: _AsReal(gm).run(*args))(*fakes)
    except PipelineError:
        raise
    except Exception as e:  # (the graph runs eagerly rather than the step failing)
        raise PipelineError(f"lazy-mlir: complex values not rewritten in real arithmetic "
                            f"({type(e).__name__}: {e})", None) from e
