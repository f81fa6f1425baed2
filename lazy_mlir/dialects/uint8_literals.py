"""uint8 literals that survive a round trip through text.

torch-mlir folds a uint8 constant (``ones_like(x, dtype=torch.uint8)``, a
conversion of one) into ``torch.vtensor.literal(dense<1> : tensor<4xui8>) :
!torch.vtensor<[4],ui8>``, and prints it; parsing that text back (the next
stage starts from the previous one's text) fails the op's verifier, which
infers si8 from the attribute: "'torch.vtensor.literal' op inferred type(s)
'!torch.vtensor<[4],si8>' are incompatible with return type(s)", and the
graph ran eagerly (lazy device) or raised (lm.jit). ``reparseable`` writes
each such literal as an int16 literal of the same values and a conversion
to uint8, which torch-mlir lowers exactly; an ``abs`` between them (of
values 0-255: the values themselves) keeps torch-mlir from folding them back
into the uint8 literal.
"""
from __future__ import annotations

import re

# (result, values, tensor shape, vtensor shape); values printed as numbers
# (a hex blob is the bytes, which an int16 literal would read otherwise)
_LITERAL = re.compile(
    r"^(\s*)(%[\w.$-]+) = torch\.vtensor\.literal\((dense<[^>\"]*>) : "
    r"tensor<([0-9x]*?)x?ui8>\) : !torch\.vtensor<\[([0-9,]*)\],ui8>\s*$", re.M)


def reparseable(text: str) -> str:
    """``text`` with its uint8 ``torch.vtensor.literal``s as int16 literals
    converted to uint8 (the same values, an op the parser accepts)."""
    if "xui8>) : !torch.vtensor" not in text and "<ui8>) : !torch.vtensor" not in text:
        return text
    count = [0]

    def rewrite(m: re.Match) -> str:
        indent, result, values, shape, vshape = m.groups()
        k = count[0] = count[0] + 1
        wide = f"!torch.vtensor<[{vshape}],si16>"
        tensor = f"tensor<{shape}xsi16>" if shape else "tensor<si16>"
        return (f"{indent}%u8lit{k} = torch.vtensor.literal({values} : {tensor}) : {wide}\n"
                f"{indent}%u8lit{k}_dtype = torch.constant.int 0\n"
                f"{indent}%u8lit{k}_false = torch.constant.bool false\n"
                f"{indent}%u8lit{k}_none = torch.constant.none\n"
                f"{indent}%u8lit{k}_kept = torch.aten.abs %u8lit{k} : {wide} -> {wide}\n"
                f"{indent}{result} = torch.aten.to.dtype %u8lit{k}_kept, %u8lit{k}_dtype, "
                f"%u8lit{k}_false, %u8lit{k}_false, %u8lit{k}_none : {wide}, !torch.int, "
                f"!torch.bool, !torch.bool, !torch.none -> !torch.vtensor<[{vshape}],ui8>")
    return _LITERAL.sub(rewrite, text)


__all__ = ["reparseable"]
