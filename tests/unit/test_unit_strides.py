"""``passes/unit_strides`` on hand-written linalg: a slice's stride along a
dimension of size 1 becomes 1, others stay. The e2e test compiles it
(test_fuzz_findings_torch_compile.py); nothing here compiles."""
from lazy_mlir.dialects.runner import run_pipeline
from lazy_mlir.passes.unit_strides import MARK, unit_strides

MODULE = """
func.func @main(%x: tensor<5x1x4xf32>, %y: tensor<5x2x4xf32>) -> (tensor<5x1x4xf32>, tensor<5x2x4xf32>) {
  %a = tensor.extract_slice %x[0, 0, 0] [5, 1, 4] [1, 3, 1] : tensor<5x1x4xf32> to tensor<5x1x4xf32>
  %b = tensor.extract_slice %x[0, 0, 0] [3, 1, 2] [2, 1, 2] : tensor<5x1x4xf32> to tensor<3x1x2xf32>
  %c = tensor.insert_slice %a into %y[0, 1, 0] [5, 1, 4] [1, 7, 1] : tensor<5x1x4xf32> into tensor<5x2x4xf32>
  return %a, %c : tensor<5x1x4xf32>, tensor<5x2x4xf32>
}
"""


def test_strides_along_unit_sizes_become_one_and_others_stay():
    counts = []
    text = run_pipeline(MODULE, "builtin.module()", "linalg",
                        lambda m: counts.append(unit_strides(m)))
    assert counts == [2] and text.count(MARK) == 2
    assert "[5, 1, 4] [1, 3, 1]" not in text and "[5, 1, 4] [1, 7, 1]" not in text
    assert text.count("[5, 1, 4] [1, 1, 1]") == 2
    assert "[3, 1, 2] [2, 1, 2]" in text  # (steps along longer dimensions stay)
