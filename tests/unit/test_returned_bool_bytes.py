"""``passes/returned_bool_bytes`` on hand-written linalg: it barriers the
``i1`` input of a byte conversion when the ``i1`` tensor is returned too
(not otherwise). The e2e test compiles it (test_fuzz_findings.py); nothing
here compiles."""
from lazy_mlir.dialects.linalg_edit import FUSION_BARRIER
from lazy_mlir.dialects.runner import run_pipeline
from lazy_mlir.passes.returned_bool_bytes import MARK as BYTES, bool_bytes_apart


def _edited(text: str, edit) -> tuple[str, list]:
    counts = []
    out = run_pipeline(text, "builtin.module()", "linalg", lambda m: counts.append(edit(m)))
    return out, counts


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
