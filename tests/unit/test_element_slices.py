"""``passes/element_slices`` on hand-written linalg: a one-element slice
that an ``expand_shape`` reaches (directly, through elementwise ops or a
concatenation) becomes a fill with its element; a longer slice, or one no
expansion reaches, is left. The e2e tests compile it (test_lifted_offsets.py,
test_fuzz_findings_torch_compile.py); nothing here compiles."""
import pytest

from lazy_mlir.dialects.runner import run_pipeline
from lazy_mlir.passes.element_slices import MARK, fill_reshaped_elements


def _edited(text: str) -> tuple[str, list]:
    counts = []
    out = run_pipeline(text, "builtin.module()", "linalg",
                       lambda m: counts.append(fill_reshaped_elements(m)))
    return out, counts


def _module(sizes: str, sliced: str, then: str, out: str) -> str:
    return f"""
#map = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<7xf32>, %i: index) -> tensor<{out}> {{
  %s = tensor.extract_slice %x[%i] [{sizes}] [2] : tensor<7xf32> to tensor<{sliced}xf32>
  {then}
}}
"""


_EXPANDED = """%e = tensor.expand_shape %s [[0, 1]] output_shape [1, 1] : tensor<1xf32> into tensor<1x1xf32>
  return %e : tensor<1x1xf32>"""
_THROUGH = """%em = tensor.empty() : tensor<1xf32>
  %g = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%s : tensor<1xf32>) outs(%em : tensor<1xf32>) {
  ^bb0(%in: f32, %o: f32):
    %y = arith.negf %in : f32
    linalg.yield %y : f32
  } -> tensor<1xf32>
  %c = tensor.concat dim(0) %g, %s : (tensor<1xf32>, tensor<1xf32>) -> tensor<2xf32>
  %e = tensor.expand_shape %c [[0, 1]] output_shape [2, 1] : tensor<2xf32> into tensor<2x1xf32>
  return %e : tensor<2x1xf32>"""


@pytest.mark.parametrize("then, out", [(_EXPANDED, "1x1xf32"), (_THROUGH, "2x1xf32")],
                         ids=["expanded", "through_an_elementwise_op_and_a_concat"])
def test_a_one_element_slice_an_expansion_reaches_is_a_fill(then, out):
    text, counts = _edited(_module("1", "1", then, out))
    assert counts == [1] and text.count(MARK) == 1
    assert "tensor.extract_slice" not in text
    assert "tensor.extract %arg0[%arg1] : tensor<7xf32>" in text


@pytest.mark.parametrize("module", [
    _module("3", "3", "%e = tensor.expand_shape %s [[0, 1]] output_shape [3, 1] : tensor<3xf32> "
            "into tensor<3x1xf32>\n  return %e : tensor<3x1xf32>", "3x1xf32"),
    _module("1", "1", "return %s : tensor<1xf32>", "1xf32"),
], ids=["three_elements", "no_expansion"])
def test_left_as_it_is(module):
    text, counts = _edited(module)
    assert counts == [0] and MARK not in text and "tensor.extract_slice" in text
