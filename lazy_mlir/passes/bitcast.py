"""``view(dtype)`` as a bitcast.

torch-mlir 20261001 has no linalg lowering for ``torch.aten.view.dtype``
(the linalg pipeline fails on it). IREE's own torch input conversion takes
the TorchConversion ops that torch-mlir's Python bindings cannot parse, so
a graph holding such views is handed to IREE at the torch backend contract
with each view written as ``to_builtin_tensor``, a bitcast,
``from_builtin_tensor`` (``pipeline/stages.py``): ``arith.bitcast`` between
types of one width, ``flow.tensor.bitcast`` (the same bytes, another shape)
where the width changes (float32 as uint8: the last dimension scaled, as
``view(dtype)`` scales it). Views that involve bool are left alone: such a
graph still fails to compile and falls back, as before.
"""
from __future__ import annotations

import re

_VIEW_DTYPE = re.compile(
    r"^(?P<indent>\s*)(?P<res>%[\w.$#-]+) = torch\.aten\.view\.dtype (?P<src>%[\w.$#-]+), "
    r"%[\w.$#-]+ : !torch\.vtensor<\[(?P<shape>[0-9,]*)\],(?P<src_t>\w+)>, !torch\.int -> "
    r"!torch\.vtensor<\[(?P<shape2>[0-9,]*)\],(?P<dst_t>\w+)>\s*$", re.M)

# torch element type -> (builtin type, bits); bool (i1) is not a bitcast.
_BUILTIN = {"f16": ("f16", 16), "bf16": ("bf16", 16), "f32": ("f32", 32), "f64": ("f64", 64),
            "si8": ("i8", 8), "ui8": ("i8", 8), "si16": ("i16", 16), "si32": ("i32", 32),
            "si64": ("i64", 64)}


def _tensor(shape: str, elem: str) -> str:
    return f"tensor<{shape.replace(',', 'x')}x{elem}>" if shape else f"tensor<{elem}>"


def _bits(shape: str, elem: tuple) -> int:
    n = 1
    for d in shape.split(",") if shape else ():
        n *= int(d)
    return n * elem[1]


def view_dtype_as_bitcast(text: str) -> str | None:
    """``text`` with every ``view.dtype`` written as a bitcast, or None when
    some view is not one (bool, a dynamic shape, a form the pattern does not
    know)."""
    count = [0]

    def rewrite(m: re.Match) -> str:
        src, dst = _BUILTIN.get(m["src_t"]), _BUILTIN.get(m["dst_t"])
        if src is None or dst is None or _bits(m["shape"], src) != _bits(m["shape2"], dst):
            raise _NotABitcast
        i, res = m["indent"], m["res"]
        vt_in = f"!torch.vtensor<[{m['shape']}],{m['src_t']}>"
        vt_out = f"!torch.vtensor<[{m['shape2']}],{m['dst_t']}>"
        t_in, t_out = _tensor(m["shape"], src[0]), _tensor(m["shape2"], dst[0])
        count[0] += 1
        tmp = f"%lazy_mlir_bits{count[0]}"  # "%0_x" is not an SSA name: a fresh name
        if src[1] == dst[1]:  # (one width: the same shape, each element cast)
            cast = f"arith.bitcast {tmp}_in : {t_in} to {t_out}"
        else:  # the same bytes in another shape
            cast = f"flow.tensor.bitcast {tmp}_in : {t_in} -> {t_out}"
        return (f"{i}{tmp}_in = torch_c.to_builtin_tensor {m['src']} : {vt_in} -> {t_in}\n"
                f"{i}{tmp} = {cast}\n"
                f"{i}{res} = torch_c.from_builtin_tensor {tmp} : {t_out} -> {vt_out}")
    try:
        out, n = _VIEW_DTYPE.subn(rewrite, text)
    except _NotABitcast:
        return None
    if n != text.count("torch.aten.view.dtype"):
        return None  # a form the pattern does not know
    return out


class _NotABitcast(Exception):
    pass
