"""``passes/scalar_dispatches``: independent scalar ops are cut into runs of
at most ``MAX_BINDINGS`` estimated bindings, by barriers that iree-compile
keeps in place (no reshape reads a barrier: IREE would move the barrier
down to the reshape), also for a value a loop reads."""
import re

from lazy_mlir.dialects.torch_import import parse
from lazy_mlir.passes import scalar_dispatches as S

N = 20
_GENERIC = ("linalg.generic {{indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], "
            "iterator_types = []}} ins(%a : tensor<f32>) outs(%e : tensor<f32>) {{\n"
            "  ^bb0(%in: f32, %out: f32):\n    %c = arith.constant {i}.0 : f32\n"
            "    %r = arith.addf %in, %c : f32\n    linalg.yield %r : f32\n  }} -> tensor<f32>")


def _module():
    """N scalar ops, each stacked (expand_shape + concat, as torch-mlir
    lowers ``stack``), two of them read by a loop."""
    lines = ["func.func @main(%a: tensor<f32>, %n: index) -> (tensor<20xf32>, tensor<f32>) {",
             "  %e = tensor.empty() : tensor<f32>"]
    for i in range(N):
        lines.append(f"  %s{i} = " + _GENERIC.format(i=i))
        lines.append(f"  %x{i} = tensor.expand_shape %s{i} [] output_shape [1] "
                     ": tensor<f32> into tensor<1xf32>")
    lines += ["  %c0 = arith.constant 0 : index", "  %c1 = arith.constant 1 : index",
              "  %l = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %s3) -> (tensor<f32>) {",
              "    scf.yield %s5 : tensor<f32>", "  }",
              f"  %cat = tensor.concat dim(0) {', '.join(f'%x{i}' for i in range(N))} : "
              f"({', '.join(['tensor<1xf32>'] * N)}) -> tensor<20xf32>",
              "  return %cat, %l : tensor<20xf32>, tensor<f32>", "}"]
    return parse("\n".join(lines))


def test_scalar_runs_are_cut_by_barriers_no_reshape_reads():
    module = _module()
    with module.context:
        cuts = S.bound_scalar_dispatches(module)
        module.operation.verify()
        text = str(module)
    # a result per op, %a read once per run (the empty init is cloned): 15 + 5
    assert cuts == 1
    barriers = set(re.findall(r'(%[\w.#]+) = "iree_tensor_ext\.compute_barrier\.start"', text))
    assert S.count_in(text) == len(barriers) > 0
    reshaped = set(re.findall(r"tensor\.(?:expand|collapse)_shape (%[\w.#]+)", text))
    assert not barriers & reshaped  # (IREE would carry such a barrier down to the reshape)
