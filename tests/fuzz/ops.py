"""The op catalog: each proposal looks at the live eager variables and returns
one record (an ``Op``) or None when it does not apply to what it drew.

Views of every kind (slices, narrow, select, view/reshape, view(dtype),
unfold, as_strided, diagonal, expand, transpose/permute, unbind/split
outputs), in-place ops through them, out-of-place ops, ``out=`` variants,
host reads mid-program and autograd. Proposals need not be valid: the
generator keeps what eager PyTorch accepts (and some of what it refuses).
"""
from __future__ import annotations

import random

import torch

from .program import Op

SAME_WIDTH = {torch.float32: (torch.int32,), torch.int32: (torch.float32,),
              torch.int64: (torch.float64,), torch.float64: (torch.int64,),
              torch.int16: (torch.float16, torch.bfloat16), torch.float16: (torch.int16,),
              torch.bfloat16: (torch.int16,), torch.uint8: (torch.int8, torch.bool),
              torch.int8: (torch.uint8,), torch.bool: (torch.uint8,)}
ALL = (torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
       torch.uint8, torch.bool, torch.float16, torch.bfloat16)


def dt(d: torch.dtype) -> str:
    return f"torch.{str(d)[6:]}"


def _pick(rng, env, pred=lambda t: True):
    ids = [i for i, t in env.items() if isinstance(t, torch.Tensor) and pred(t)]
    if not ids:
        return None, None
    i = rng.choice(ids)
    return i, env[i]


def _scalar(rng, d: torch.dtype):
    if d == torch.bool:
        return rng.choice((True, False))
    if d.is_floating_point:
        return rng.choice((0.5, -1.5, 2.0, 3.0, -0.25, 1))
    return rng.choice((1, 2, 3, -2, 5, 7)) if d != torch.uint8 else rng.choice((1, 2, 3, 5))


def _dim(rng, t):
    return rng.randrange(t.dim()) - (t.dim() if rng.random() < 0.3 else 0)


def _partner(rng, env, t, exclude=None):
    """A variable broadcastable to ``t``'s shape (or None)."""
    ok = []
    for i, u in env.items():
        if i == exclude or not isinstance(u, torch.Tensor):
            continue
        try:
            if torch.broadcast_shapes(u.shape, t.shape) == t.shape:
                ok.append(i)
        except RuntimeError:
            pass
    return rng.choice(ok) if ok else None


# ------------------------------------------------------------------- views
def view(rng, env, nid):
    i, t = _pick(rng, env)
    if i is None:
        return None
    n, s = t.dim(), tuple(t.shape)
    kind = rng.choice(("slice", "narrow", "select", "index", "view", "reshape", "flatten",
                       "dtype", "unfold", "as_strided", "diagonal", "expand", "transpose",
                       "permute", "t", "unsqueeze", "squeeze", "unbind", "split", "chunk",
                       "movedim", "alias", "view_as"))
    one = lambda tmpl: Op(f"view.{kind}", "{o0} = " + tmpl, (i,), (nid,), view=True)
    if kind == "unsqueeze":
        return one("{a0}.unsqueeze(%d)" % rng.randint(-n - 1, n))
    if kind == "alias":
        return one(rng.choice(("{a0}.view_as({a0})", "{a0}.detach()", "{a0}[...]")))
    if kind == "dtype":
        to = rng.choice(SAME_WIDTH[t.dtype]) if rng.random() < 0.85 else rng.choice(ALL)
        return one("{a0}.view(%s)" % dt(to))
    if kind == "as_strided":
        return _as_strided(rng, t, one)
    if kind == "expand":
        sizes = [rng.choice((1, 2, 3)) if d == 1 else d for d in s]
        if rng.random() < 0.4:
            sizes.insert(0, rng.choice((1, 2)))
        return one("{a0}.expand(%s)" % (tuple(sizes),))
    if kind in ("view", "reshape"):
        return one("{a0}.%s(%s)" % (kind, _shape_like(rng, t.numel(), s)))
    if kind == "flatten":
        return one("{a0}.flatten()")
    if n == 0:
        return None
    d = _dim(rng, t)
    size = s[d]
    if kind == "slice":
        a, b = sorted(rng.randint(-size - 1, size + 1) for _ in range(2))
        step = rng.choice((1, 1, 2, 3))
        return one("{a0}[%s%s:%s:%d]" % (":, " * (d % n), a, b, step))
    if kind == "narrow":
        start = rng.randint(0, size)
        return one("{a0}.narrow(%d, %d, %d)" % (d, start, rng.randint(0, size - start)))
    if kind in ("select", "index"):
        if size == 0:
            return None
        j = rng.randint(-size, size - 1)
        return one("{a0}.select(%d, %d)" % (d, j) if kind == "select" else "{a0}[%d]" % j)
    if kind == "unfold":
        sz = rng.randint(0, size + 1) if size else 0
        return one("{a0}.unfold(%d, %d, %d)" % (d, sz, rng.randint(1, 3)))
    if kind == "diagonal":
        if n < 2:
            return None
        d2 = rng.choice([k for k in range(n) if k != d % n])
        return one("{a0}.diagonal(%d, %d, %d)" % (rng.randint(-2, 2), d, d2))
    if kind == "transpose":
        return one("{a0}.transpose(%d, %d)" % (d, _dim(rng, t)))
    if kind == "t":
        return one(rng.choice(("{a0}.t()", "{a0}.mT", "{a0}.T"))) if n <= 2 or rng.random() < .3 \
            else None
    if kind == "permute":
        p = list(range(n))
        rng.shuffle(p)
        return one("{a0}.permute(%s)" % (tuple(p),))
    if kind == "movedim":
        return one("{a0}.movedim(%d, %d)" % (d, _dim(rng, t)))
    if kind == "squeeze":
        return one("{a0}.squeeze(%d)" % d if rng.random() < 0.7 else "{a0}.squeeze()")
    if kind == "view_as":
        j = rng.choice([k for k, u in env.items() if u.numel() == t.numel()])
        return Op("view.view_as", "{o0} = {a0}.view_as({a1})", (i, j), (nid,), view=True)
    return _pieces(rng, kind, i, d, size, nid)


def _pieces(rng, kind, i, d, size, nid):
    """``unbind``/``split``/``chunk`` outputs (views, several records' worth)."""
    if size > 4 or size == 0:
        return None
    if kind == "unbind":
        outs = tuple(range(nid, nid + size))
        lhs = ", ".join("{o%d}" % k for k in range(size)) + ("," if size == 1 else "")
        return Op("view.unbind", lhs + " = {a0}.unbind(%d)" % d, (i,), outs, view=True)
    step = rng.randint(1, size)
    parts = -(-size // step) if kind == "split" else min(size, step)
    if kind == "chunk":
        parts = len(torch.empty(size).chunk(step))
    outs = tuple(range(nid, nid + parts))
    lhs = ", ".join("{o%d}" % k for k in range(parts)) + ("," if parts == 1 else "")
    call = "split(%d, %d)" % (step, d) if kind == "split" else "chunk(%d, %d)" % (step, d)
    return Op(f"view.{kind}", lhs + " = {a0}." + call, (i,), outs, view=True)


def _shape_like(rng, numel: int, s) -> str:
    if numel == 0:
        return repr(tuple(s[::-1])) if s else "(0,)"
    divs = [k for k in range(1, numel + 1) if numel % k == 0]
    a = rng.choice(divs)
    shape = rng.choice(((numel,), (a, numel // a), (numel // a, a, 1), (-1, a), (1, -1)))
    return repr(tuple(shape))


def _as_strided(rng, t, one):
    if t.dtype == torch.bool and rng.random() < 0.5:
        return None
    room = t.untyped_storage().nbytes() // t.element_size()
    size = [rng.randint(1, 3) for _ in range(rng.randint(1, 2))]
    stride = [rng.choice((0, 1, 2, 3)) for _ in size]
    span = sum((a - 1) * b for a, b in zip(size, stride)) + 1
    if span > room:
        return None
    off = rng.randint(0, room - span)
    return one("{a0}.as_strided(%s, %s, %d)" % (tuple(size), tuple(stride), off))


# ---------------------------------------------------------------- in-place
def inplace(rng, env, nid):
    i, t = _pick(rng, env)
    if i is None:
        return None
    d = t.dtype
    fl, isbool = d.is_floating_point, d == torch.bool
    kind = rng.choice(("add", "sub", "mul", "fill", "zero", "copy", "clamp", "neg", "abs",
                       "bits", "not", "masked_fill", "setitem", "index_put", "index_add",
                       "scatter", "relu", "floordiv", "div", "pow", "addcmul", "lerp",
                       "round", "tensor_op", "nograd"))
    one = lambda tmpl, args=(i,): Op(f"inplace.{kind}", tmpl, args)
    c = _scalar(rng, d)
    if kind in ("add", "sub", "mul"):
        return one("{a0}.%s_(%r)" % (kind, c if rng.random() < 0.8 else _scalar(rng, rng.choice(ALL))))
    if kind == "tensor_op":
        j = _partner(rng, env, t)
        if j is None:
            return None
        op = rng.choice(("add_", "sub_", "mul_", "copy_", "__iadd__", "bitwise_or_", "maximum"))
        if op == "maximum":
            return one("torch.maximum({a0}, {a1}, out={a0})", (i, j))
        return one("{a0}.%s({a1})" % op, (i, j))
    if kind == "fill":
        return one("{a0}.fill_(%r)" % c)
    if kind == "zero":
        return one("{a0}.zero_()")
    if kind == "copy":
        j = _partner(rng, env, t, exclude=i)
        return None if j is None else one("{a0}.copy_({a1})", (i, j))
    if kind == "clamp":
        lo = _scalar(rng, d)
        return one("{a0}.clamp_(%r, %r)" % (lo, lo + 3) if not isbool else "{a0}.clamp_(min=0)")
    if kind in ("neg", "abs", "relu", "round") and not isbool:
        return one("{a0}.%s_()" % kind)
    if kind == "bits" and not fl:
        op = rng.choice(("bitwise_and_", "bitwise_or_", "bitwise_xor_"))
        return one("{a0}.%s(%r)" % (op, True if isbool else rng.choice((3, 6, 0x55, -1))))
    if kind == "not":
        return one("{a0}.logical_not_()" if rng.random() < 0.5 else "{a0}.bitwise_not_()")
    if kind == "masked_fill":
        return one("{a0}.masked_fill_({a0} > %r, %r)" % (_scalar(rng, d) if not isbool else False, c))
    if kind == "setitem" and t.dim():
        return one("{a0}[%d] = %r" % (rng.randrange(-t.shape[0], max(t.shape[0], 1)), c))
    if kind in ("index_put", "index_add", "scatter") and t.dim() and t.shape[0]:
        return _indexed(rng, env, i, t, kind, nid)
    if kind == "floordiv" and not fl and not isbool:
        return one("{a0}.%s(%d)" % (rng.choice(("floor_divide_", "remainder_")), rng.choice((2, 3, -3))))
    if kind == "div" and fl:
        return one("{a0}.div_(%r)" % rng.choice((2.0, -4.0, 0.5)))
    if kind == "pow" and fl:
        return one("{a0}.pow_(2)")
    if kind in ("addcmul", "lerp") and fl:
        j = _partner(rng, env, t)
        if j is None:
            return None
        if kind == "addcmul":
            return one("{a0}.addcmul_({a1}, {a1}, value=0.5)", (i, j))
        return one("{a0}.lerp_({a1}, 0.25)", (i, j))
    if kind == "nograd" and fl:
        return one("with torch.no_grad(): {a0}.mul_(2)")
    return None


def _indexed(rng, env, i, t, kind, nid):
    n0 = t.shape[0]
    idx = [rng.randrange(-n0 if kind == "index_put" else 0, n0) for _ in range(rng.randint(1, 3))]
    rest = tuple(t.shape[1:])
    vdt = t.dtype if rng.random() < 0.85 else rng.choice(ALL)
    vals = "torch.ones(%s, dtype=%s, device=dev)" % ((len(idx),) + rest, dt(vdt))
    it = "torch.tensor(%r, device=dev)" % (idx,)
    if kind == "index_put":
        acc = rng.choice((True, False)) and len(set(i % n0 for i in idx)) == len(idx)
        return Op("inplace.index_put", "{a0}.index_put_((%s,), %s, accumulate=%s)" % (
            it, vals, acc), (i,))
    if kind == "index_add":
        return Op("inplace.index_add", "{a0}.index_add_(0, %s, %s)" % (it, vals), (i,))
    if len(set(idx)) != len(idx):
        return None
    shape = (len(idx),) + rest
    index = "%s.reshape(%s).expand(%s)" % (it, (len(idx),) + (1,) * len(rest), shape)
    return Op("inplace.scatter", "{a0}.scatter_(0, %s, %s)" % (index, vals), (i,))


# ------------------------------------------------------------ out-of-place
def compute(rng, env, nid):
    i, t = _pick(rng, env)
    if i is None:
        return None
    d, n = t.dtype, t.dim()
    kind = rng.choice(("binary", "binary", "unary", "to", "reduce", "cumsum", "matmul", "cat",
                       "where", "compare", "flip", "roll", "index_select", "gather", "factory",
                       "minmax", "sort", "scalar_feedback", "out"))
    one = lambda tmpl, args=(i,), outs=(nid,): Op(f"compute.{kind}", tmpl, args, outs)
    if kind == "binary":
        j = _partner(rng, env, t) if rng.random() < 0.7 else None
        op = rng.choice(("add", "sub", "mul", "div", "maximum", "minimum", "bitwise_and",
                         "logical_and", "floor_divide", "remainder", "pow"))
        rhs = "{a1}" if j is not None else repr(_scalar(rng, d))
        if op in ("floor_divide", "remainder") and not d.is_floating_point:
            rhs = repr(rng.choice((2, 3, -3)))
            j = None
        return one("{o0} = torch.%s({a0}, %s)" % (op, rhs), (i,) if j is None else (i, j))
    if kind == "unary":
        op = rng.choice(("neg", "abs", "clone", "contiguous", "exp", "sin", "relu", "sigmoid",
                         "tanh", "logical_not", "sign", "bitwise_not", "square", "sqrt"))
        if op in ("clone", "contiguous"):
            return one("{o0} = {a0}.%s()" % op)
        return one("{o0} = torch.%s({a0})" % op)
    if kind == "to":
        return one("{o0} = {a0}.to(%s)" % dt(rng.choice(ALL)))
    if kind == "reduce":
        op = rng.choice(("sum", "sum", "prod", "mean", "amax", "amin", "any", "all", "argmax",
                         "argmin", "count_nonzero"))
        if n and rng.random() < 0.7:
            kd = ", keepdim=True" if rng.random() < 0.3 and op not in ("count_nonzero",) else ""
            return one("{o0} = torch.%s({a0}, %d%s)" % (op, _dim(rng, t), kd))
        return one("{o0} = torch.%s({a0})" % op)
    if kind == "cumsum" and n:
        return one("{o0} = torch.%s({a0}, %d)" % (rng.choice(("cumsum", "cumprod")), _dim(rng, t)))
    if kind == "matmul":
        j, u = _pick(rng, env, lambda u: u.dim() in (1, 2) and n in (1, 2)
                     and u.shape[0] == t.shape[-1])
        return None if j is None else one("{o0} = torch.matmul({a0}, {a1})", (i, j))
    if kind == "cat" and n:
        d0 = _dim(rng, t)
        same = [k for k, u in env.items() if u.dim() == n and all(
            a == b for q, (a, b) in enumerate(zip(u.shape, t.shape)) if q != d0 % n)]
        j = rng.choice(same)
        fn = rng.choice(("cat", "stack")) if t.shape == env[j].shape else "cat"
        return one("{o0} = torch.%s([{a0}, {a1}], %d)" % (fn, d0), (i, j))
    if kind == "where":
        j = _partner(rng, env, t)
        return None if j is None else one("{o0} = torch.where({a0} > 0, {a0}, {a1})", (i, j))
    if kind == "compare":
        op = rng.choice(("eq", "ne", "lt", "ge"))
        return one("{o0} = torch.%s({a0}, %r)" % (op, _scalar(rng, d)))
    if kind == "flip" and n:
        return one(rng.choice(("{o0} = torch.flip({a0}, (%d,))" % _dim(rng, t),
                               "{o0} = torch.roll({a0}, 1, %d)" % _dim(rng, t))))
    if kind == "roll" and n:
        return one(_roll(rng, t))
    if kind in ("index_select", "gather") and n and t.shape[0]:
        idx = [rng.randrange(t.shape[0]) for _ in range(rng.randint(1, 3))]
        if kind == "index_select":
            return one("{o0} = {a0}.index_select(0, torch.tensor(%r, device=dev))" % (idx,))
        return one("{o0} = {a0}[torch.tensor(%r, device=dev)]" % (idx,))
    if kind == "factory":
        return one(rng.choice(("{o0} = torch.zeros_like({a0})", "{o0} = torch.full_like({a0}, %r)"
                               % _scalar(rng, d), "{o0} = torch.arange(%d, device=dev)"
                               % rng.randint(0, 5), "{o0} = torch.ones_like({a0}, dtype=%s)"
                               % dt(rng.choice(ALL)))))
    if kind == "minmax" and n:
        return one("{o0}, {o1} = torch.%s({a0}, %d)" % (rng.choice(("max", "min")), _dim(rng, t)),
                   outs=(nid, nid + 1))
    if kind == "sort" and n:
        return one("{o0}, {o1} = torch.sort({a0}, %d, stable=True)" % _dim(rng, t),
                   outs=(nid, nid + 1))
    if kind == "scalar_feedback" and t.numel():
        return one("{o0} = {a0} + {a0}.flatten()[0].item()")
    if kind == "out":
        return _out(rng, env, i, t, nid)
    return None


def _roll(rng, t) -> str:
    """Shifts past the size either way and none (the flat tensor rolled):
    torch-mlir's slices clamp such shifts (a silent wrong answer, fixed)."""
    d = _dim(rng, t)
    size = t.shape[d]
    shift = rng.choice((1, -1, 0, size, size + 2, -size - 1, 2 * size + 1))
    if rng.random() < 0.25:
        return "{o0} = torch.roll({a0}, %d)" % shift
    return "{o0} = torch.roll({a0}, %d, %d)" % (shift, d)


def _out(rng, env, i, t, nid):
    """``torch.<op>(..., out=<an existing variable, maybe a view>)``."""
    form = rng.choice(("torch.add({a0}, {a0}, out={a1})", "torch.mul({a0}, 2, out={a1})",
                       "torch.neg({a0}, out={a1})", "torch.clamp({a0}, 0, 3, out={a1})",
                       "torch.sum({a0}, 0, out={a1})", "torch.cumsum({a0}, 0, out={a1})",
                       "torch.abs({a0}, out={a1})", "torch.where({a0} > 0, {a0}, 0, out={a1})"))
    try:
        with torch.no_grad():
            want = eval(form.replace(", out={a1}", "").format(a0="t"), {"torch": torch, "t": t})
    except Exception:  # noqa: BLE001
        return None
    same = [k for k, u in env.items() if u.shape == want.shape]
    if "sum(" in form or "cumsum(" in form:  # (an out= sharing the input's memory: a listed
        # difference, README "Deliberate differences"; PyTorch leaves it undefined)
        ptr = t.untyped_storage().data_ptr()
        same = [k for k in same if env[k].untyped_storage().data_ptr() != ptr]
    if not same:
        return None
    return Op("out", form, (i, rng.choice(same)))


# --------------------------------------------------------- reads, autograd
def read(rng, env, nid):
    i, t = _pick(rng, env)
    if i is None:
        return None
    kind = rng.choice(("item", "cpu", "tolist", "bool"))
    if kind == "item" and t.numel() == 1:
        return Op("read.item", "reads.append({a0}.item())", (i,))
    if kind == "bool":
        return Op("read.bool", "reads.append(bool({a0}.any()))", (i,))
    if kind == "tolist":
        return Op("read.tolist", "reads.append({a0}.tolist())", (i,))
    return Op("read.cpu", "reads.append({a0}.cpu().clone())", (i,))


def backward(rng, env, nid):
    ids = [k for k, t in env.items() if t.requires_grad and t.is_floating_point()]
    if not ids:
        return None
    pick = sorted(rng.sample(ids, min(len(ids), rng.randint(1, 2))))
    return Op("backward", "backward([%s])" % ", ".join("{a%d}" % k for k in range(len(pick))),
              tuple(pick))


WEIGHTS = ((view, 36), (inplace, 30), (compute, 24), (read, 5), (backward, 5))


def propose(rng: random.Random, env: dict, nid: int, backward_done: bool,
            functional: bool = False):
    r = rng.random() * sum(w for _, w in WEIGHTS)
    for fn, w in WEIGHTS:
        r -= w
        if r < 0:
            break
    if fn is backward and backward_done or functional and fn in (read, backward):
        return None
    try:
        op = fn(rng, env, nid)
    except (IndexError, ValueError, RuntimeError):  # a draw that does not fit (empty choice)
        return None
    if functional and op is not None and ("item()" in op.template or "arange" in op.template):
        return None
    return op
