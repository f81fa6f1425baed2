"""``linalg_edit``'s fusion barrier on a tensor with dynamic dimensions:
IREE's ``compute_barrier.start`` takes their sizes as operands, and a
module with dynamic dimensions whose value passed one failed to compile
("value set has 1 dynamic dimensions but only 0 dimension values are
attached": X-MOD's step graphs, dynamic in their token counts per
language, ran eagerly whole)."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np

from lazy_mlir.dialects import linalg_edit as E
from lazy_mlir.dialects.torch_import import parse

DYNAMIC_EXP = """
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @main(%a: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %c0 = arith.constant 0 : index
  %d = tensor.dim %a, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%d) : tensor<?x4xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%a : tensor<?x4xf32>) outs(%e : tensor<?x4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.exp %x : f32
    linalg.yield %y : f32
  } -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}
"""

def test_a_barrier_on_a_dynamic_tensor_carries_its_sizes_and_compiles():
    module = parse(DYNAMIC_EXP)
    exp = next(op for op in E.function_bodies(module)[0] if op.name == "linalg.generic")
    E.barrier_before(exp, 0)
    text = str(module)
    assert E.FUSION_BARRIER in text and text.count("tensor.dim") == 2  # (its own and ours)
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    vm = rt.load_vm_flatbuffer(ic.compile_str(text, extra_args=flags), driver="local-sync")
    x = np.linspace(-1, 1, 20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_allclose(vm.main(x).to_host(), np.exp(x), rtol=1e-6)
