"""``passes/unit_slices`` on hand-written linalg: an ``expand_shape`` that
inserts unit dimensions into a one-element slice becomes a slice of the
expanded source (static or runtime offsets, strides kept); a longer slice
or an expansion that splits a dimension is left. The e2e tests compile it
(test_lifted_offsets.py); nothing here compiles."""
import pytest

from lazy_mlir.dialects.runner import run_pipeline
from lazy_mlir.passes.unit_slices import MARK, unit_dims_before_slices


def _edited(text: str) -> tuple[str, list]:
    counts = []
    out = run_pipeline(text, "builtin.module()", "linalg",
                       lambda m: counts.append(unit_dims_before_slices(m)))
    return out, counts


def _module(src: str, offsets: str, sizes: str, strides: str, sliced: str,
            groups: str, out: str) -> str:
    return f"""
func.func @main(%x: tensor<{src}xf32>, %i: index) -> tensor<{out}xf32> {{
  %s = tensor.extract_slice %x[{offsets}] [{sizes}] [{strides}] : tensor<{src}xf32> to tensor<{sliced}xf32>
  %e = tensor.expand_shape %s [{groups}] output_shape [{out.replace('x', ', ')}] : tensor<{sliced}xf32> into tensor<{out}xf32>
  return %e : tensor<{out}xf32>
}}
"""


def test_a_one_element_slice_is_taken_of_the_expanded_source():
    out, counts = _edited(_module("7", "%i", "1", "2", "1", "[0, 1]", "1x1"))
    assert counts == [1] and out.count(MARK) == 1
    assert "tensor.expand_shape %arg0 [[0, 1]] output_shape [7, 1] : tensor<7xf32> into tensor<7x1xf32>" in out
    assert (f"%expanded[%arg1, 0] [1, 1] [2, 1] {{{MARK}}} : tensor<7x1xf32> to tensor<1x1xf32>"
            in out)
    assert out.count("tensor.extract_slice") == 1  # (the old slice had no other use)


def test_unit_dimensions_around_two_source_dimensions():
    out, counts = _edited(_module("6x5", "3, %i", "1, 1", "1, 1", "1x1", "[0], [1, 2]", "1x1x1"))
    assert counts == [1]
    assert "output_shape [6, 5, 1] : tensor<6x5xf32> into tensor<6x5x1xf32>" in out
    assert (f"%expanded[3, %arg1, 0] [1, 1, 1] [1, 1, 1] {{{MARK}}} : tensor<6x5x1xf32> to "
            "tensor<1x1x1xf32>" in out)


@pytest.mark.parametrize("what, module", [
    ("a slice of three elements (compiles as it is)",
     _module("7", "%i", "3", "1", "3", "[0, 1]", "3x1")),
    ("an expansion that splits a dimension",
     _module("6x4", "%i, 0", "1, 4", "1, 1", "1x4", "[0], [1, 2]", "1x2x2")),
])
def test_left_as_it_is(what, module):
    out, counts = _edited(module)
    assert counts == [0] and MARK not in out, what
