"""Two linalg-stage workarounds of IREE 3.13, on hand-written linalg:
``passes/element_slices`` reads a one-element slice at a runtime offset as
its element (not one at a constant offset, nor a longer one), and
``passes/returned_bool_bytes`` barriers the ``i1`` input of a byte
conversion when the ``i1`` tensor is returned too (not otherwise). The
e2e tests compile both (tests/e2e/test_lifted_offsets.py,
test_fuzz_findings.py); nothing here compiles."""
from lazy_mlir.dialects.linalg_edit import FUSION_BARRIER
from lazy_mlir.dialects.runner import run_pipeline
from lazy_mlir.passes.element_slices import MARK, element_slices_as_extracts
from lazy_mlir.passes.returned_bool_bytes import MARK as BYTES, bool_bytes_apart

_SLICES = """
func.func @main(%x: tensor<7xf32>, %i: index) -> (tensor<1x1xf32>, tensor<1x1xf32>, tensor<2x1xf32>) {
  %a = tensor.extract_slice %x[%i] [1] [2] : tensor<7xf32> to tensor<1xf32>
  %b = tensor.extract_slice %x[3] [1] [1] : tensor<7xf32> to tensor<1xf32>
  %c = tensor.extract_slice %x[%i] [2] [1] : tensor<7xf32> to tensor<2xf32>
  %ea = tensor.expand_shape %a [[0, 1]] output_shape [1, 1] : tensor<1xf32> into tensor<1x1xf32>
  %eb = tensor.expand_shape %b [[0, 1]] output_shape [1, 1] : tensor<1xf32> into tensor<1x1xf32>
  %ec = tensor.expand_shape %c [[0, 1]] output_shape [2, 1] : tensor<2xf32> into tensor<2x1xf32>
  return %ea, %eb, %ec : tensor<1x1xf32>, tensor<1x1xf32>, tensor<2x1xf32>
}
"""


def _edited(text: str, edit) -> tuple[str, list]:
    counts = []
    out = run_pipeline(text, "builtin.module()", "linalg", lambda m: counts.append(edit(m)))
    return out, counts


def test_a_one_element_slice_at_a_runtime_offset_becomes_its_element():
    out, counts = _edited(_SLICES, element_slices_as_extracts)
    assert counts == [1] and out.count(MARK) == 1
    assert "tensor.extract %arg0[%arg1]" in out  # (the offset read as the element's index)
    assert out.count("tensor.extract_slice") == 2  # the constant offset and the longer slice stay


_BYTES = """
#map = affine_map<(d0) -> (d0)>
func.func @main(%x: tensor<3xf32>, %kept: tensor<3xi1>) -> (tensor<3xi1>, tensor<3xi8>, tensor<3xi8>) {
  %e = tensor.empty() : tensor<3xi1>
  %m = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%x : tensor<3xf32>) outs(%e : tensor<3xi1>) {
  ^bb0(%in: f32, %out: i1):
    %zero = arith.constant 0.0 : f32
    %c = arith.cmpf oge, %in, %zero : f32
    linalg.yield %c : i1
  } -> tensor<3xi1>
  %e8 = tensor.empty() : tensor<3xi8>
  %b = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%m : tensor<3xi1>) outs(%e8 : tensor<3xi8>) {
  ^bb0(%in: i1, %out: i8):
    %y = arith.extui %in : i1 to i8
    linalg.yield %y : i8
  } -> tensor<3xi8>
  %k = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel"]}
      ins(%kept : tensor<3xi1>) outs(%e8 : tensor<3xi8>) {
  ^bb0(%in: i1, %out: i8):
    %y = arith.extui %in : i1 to i8
    linalg.yield %y : i8
  } -> tensor<3xi8>
  return %m, %b, %k : tensor<3xi1>, tensor<3xi8>, tensor<3xi8>
}
"""


def test_the_bytes_of_a_returned_comparison_come_from_a_dispatch_of_their_own():
    out, counts = _edited(_BYTES, bool_bytes_apart)
    # (the argument's conversion is left: an argument is no dispatch's result)
    assert counts == [1] and out.count(BYTES) == 1 and out.count(FUSION_BARRIER) == 1
    _, again = _edited(_BYTES.replace("return %m, %b, %k : tensor<3xi1>,", "return %b, %b, %k : tensor<3xi8>,")
                       .replace("-> (tensor<3xi1>, tensor<3xi8>", "-> (tensor<3xi8>, tensor<3xi8>"),
                       bool_bytes_apart)
    assert again == [0]  # a comparison not returned: fused as before
