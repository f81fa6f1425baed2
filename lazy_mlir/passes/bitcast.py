"""``view(dtype)`` as a bitcast.

torch-mlir 20261001 has no linalg lowering for ``torch.aten.view.dtype``
(the linalg pipeline fails on it). Each view is written as a call of a
private function (``view_dtype_as_calls``, at the torch backend contract),
which torch-mlir's linalg pipeline carries through with its types
converted; the project's linalg-stage passes then run as on any graph, and
the calls become bitcasts in the linalg text (``calls_as_bitcasts``):
``arith.bitcast`` between types of one width, IREE's ``flow.tensor.bitcast``
(the same bytes, another shape) where the width changes (float32 as uint8:
the last dimension scaled, as ``view(dtype)`` scales it). Views that involve
bool are left alone: such a graph still fails to compile and falls back.

(These graphs went to IREE's torch input, with each view written as a
bitcast between ``torch_c`` casts, so the linalg-stage passes never ran on
them: fuzzer seed 56 beside seed 33, whose ``view(torch.int16)`` shared the
graph, under ``lm.jit``: the copy ``scatter_destinations`` gives a scatter
was missing, and a returned read came back scattered, silently.)
"""
from __future__ import annotations

import re

_VIEW_DTYPE = re.compile(
    r"^(?P<indent>\s*)(?P<res>%[\w.$#-]+) = torch\.aten\.view\.dtype (?P<src>%[\w.$#-]+), "
    r"%[\w.$#-]+ : !torch\.vtensor<\[(?P<shape>[0-9,?]*)\],(?P<src_t>\w+)>, !torch\.int -> "
    r"!torch\.vtensor<\[(?P<shape2>[0-9,?]*)\],(?P<dst_t>\w+)>[ \t]*$", re.M)

# torch element type -> bits; bool (i1) is not a bitcast.
_BITS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64, "si8": 8, "ui8": 8, "si16": 16,
         "si32": 32, "si64": 64}

CALLEE = "lazy_mlir_bitcast"
_MODULE_LINE = re.compile(r"^module\b[^\n]*\{[ \t]*$", re.M)


def _bits(shape: str, bits: int) -> int:
    n = 1
    for d in shape.split(",") if shape else ():
        n *= int(d)
    return n * bits


def view_dtype_as_calls(text: str) -> str | None:
    """``text`` (torch backend contract) with every ``view.dtype`` a call of
    a private function ``@lazy_mlir_bitcast<n>`` declared in the module, or
    None when some view is not a bitcast (bool, a width change of a dynamic
    shape, a form the pattern does not know)."""
    decls: list[str] = []

    def rewrite(m: re.Match) -> str:
        src, dst = _BITS.get(m["src_t"]), _BITS.get(m["dst_t"])
        if src is None or dst is None:
            raise _NotABitcast
        if "?" in m["shape"] + m["shape2"]:  # (dynamic: one width, the same shape, only)
            if src != dst or m["shape"] != m["shape2"]:
                raise _NotABitcast
        elif _bits(m["shape"], src) != _bits(m["shape2"], dst):
            raise _NotABitcast
        vt_in = f"!torch.vtensor<[{m['shape']}],{m['src_t']}>"
        vt_out = f"!torch.vtensor<[{m['shape2']}],{m['dst_t']}>"
        name = f"{CALLEE}{len(decls) + 1}"
        decls.append(f"  func.func private @{name}({vt_in}) -> {vt_out}\n")
        return f"{m['indent']}{m['res']} = func.call @{name}({m['src']}) : ({vt_in}) -> {vt_out}"
    try:
        out, n = _VIEW_DTYPE.subn(rewrite, text)
    except _NotABitcast:
        return None
    head = _MODULE_LINE.search(out)
    if n != text.count("torch.aten.view.dtype") or head is None:
        return None  # a form the pattern does not know
    return out[:head.end() + 1] + "".join(decls) + out[head.end() + 1:]


_CALL = re.compile(
    rf"^(?P<indent>\s*)(?P<res>%[\w.$#-]+) = (?:func\.)?call @{CALLEE}\d+\((?P<src>%[\w.$#-]+)\)"
    r" : \((?P<t_in>tensor<[^>]*>)\) -> (?P<t_out>tensor<[^>]*>)[ \t]*$", re.M)
_DECL = re.compile(rf"^[ \t]*func\.func private @{CALLEE}\d+\(.*\n", re.M)


def _width(tensor_type: str) -> str:
    """``tensor<4x2xf32>`` -> ``32``."""
    return re.sub(r"^\D*", "", tensor_type[len("tensor<"):-1].split("x")[-1])


def calls_as_bitcasts(text: str) -> str:
    """The linalg ``text`` with ``view_dtype_as_calls``' calls written as
    bitcasts and their declarations gone."""
    def rewrite(m: re.Match) -> str:
        t_in, t_out = m["t_in"], m["t_out"]
        if _width(t_in) == _width(t_out):  # (one width: the same shape, each element cast)
            cast = f"arith.bitcast {m['src']} : {t_in} to {t_out}"
        else:  # the same bytes in another shape
            cast = f"flow.tensor.bitcast {m['src']} : {t_in} -> {t_out}"
        return f"{m['indent']}{m['res']} = {cast}"
    return _DECL.sub("", _CALL.sub(rewrite, text))


class _NotABitcast(Exception):
    pass
