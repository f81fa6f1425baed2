"""The linalg-text checks that find results IREE would answer wrongly
(an argument updated in place while a result still reads it)."""
from __future__ import annotations

from lazy_mlir.pipeline.in_place import (argument_read_after_in_place_write, clobbered_args,
                                        barrier_results, folded_into_written, returned_args, shared_sort_operands,
                                        unshare_sort_operands, writes_into_args)

INSERT_AND_RETURN_ARG = """
  func.func @main(%arg0: tensor<6xf32>, %arg1: tensor<4xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
    %inserted_slice = tensor.insert_slice %arg1 into %arg0[2] [4] [1] : tensor<4xf32> into tensor<6xf32>
    return %inserted_slice, %arg0 : tensor<6xf32>, tensor<6xf32>
  }
"""

INSERT_AND_RETURN_VIEW = """
  func.func @main(%arg0: tensor<6xf32>, %arg1: tensor<4xf32>) -> (tensor<6xf32>, tensor<2x3xf32>) {
    %inserted_slice = tensor.insert_slice %arg1 into %arg0[2] [4] [1] : tensor<4xf32> into tensor<6xf32>
    %expanded = tensor.expand_shape %arg0 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
    return %inserted_slice, %expanded : tensor<6xf32>, tensor<2x3xf32>
  }
"""

INSERT_AND_COMPUTE = """
  func.func @main(%arg0: tensor<6xf32>, %arg1: tensor<4xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
    %inserted_slice = tensor.insert_slice %arg1 into %arg0[2] [4] [1] : tensor<4xf32> into tensor<6xf32>
    %1 = linalg.generic {} ins(%arg0 : tensor<6xf32>) outs(%0 : tensor<6xf32>) -> tensor<6xf32>
    return %inserted_slice, %1 : tensor<6xf32>, tensor<6xf32>
  }
"""

TWO_SORTS = """
  func.func @main(%arg0: tensor<5x10xf32>) -> (tensor<5x10xf32>, tensor<5x10xf32>) {
    %2:2 = tm_tensor.sort dimension(1) outs(%arg0, %1 : tensor<5x10xf32>, tensor<5x10xi64>) {
    } -> tensor<5x10xf32>, tensor<5x10xi64>
    %3:2 = tm_tensor.sort dimension(1) outs(%arg0, %1 : tensor<5x10xf32>, tensor<5x10xi64>) {
    } -> tensor<5x10xf32>, tensor<5x10xi64>
    return %2#0, %3#0 : tensor<5x10xf32>, tensor<5x10xf32>
  }
"""


def test_returned_args():
    assert returned_args(INSERT_AND_RETURN_ARG) == ((1, 0),)
    assert returned_args(INSERT_AND_RETURN_VIEW) == ()


def test_argument_read_after_in_place_write():
    assert argument_read_after_in_place_write(INSERT_AND_RETURN_VIEW) == "%arg0"
    assert argument_read_after_in_place_write(INSERT_AND_RETURN_ARG) is None  # returned_args
    assert argument_read_after_in_place_write(INSERT_AND_COMPUTE) is None  # IREE orders it


INSERT_INTO_VIEW = """
  func.func @main(%arg0: tensor<6xf32>, %arg1: tensor<3xf32>, %arg2: tensor<f32>) -> tensor<2x3xf32> {
    %expanded = tensor.expand_shape %arg0 [[0, 1]] output_shape [2, 3] : tensor<6xf32> into tensor<2x3xf32>
    %extracted = tensor.extract %arg2[] : tensor<f32>
    %inserted = tensor.insert %extracted into %arg1[%c0] : tensor<3xf32>
    %inserted_slice = tensor.insert_slice %arg1 into %expanded[0, 0] [1, 3] [1, 1] : tensor<3xf32> into tensor<2x3xf32>
    return %inserted_slice : tensor<2x3xf32>
  }
"""


def test_clobbered_args_are_insert_destinations():
    # (a clone folded away: IREE writes into the argument, returns a new buffer)
    assert clobbered_args(INSERT_AND_COMPUTE) == (0,)
    assert clobbered_args(INSERT_INTO_VIEW) == (0, 1)  # through a view; a scalar insert


SCATTER_INTO_VIEW = """
  func.func @main(%arg0: tensor<2x3x4xf32>, %arg1: tensor<1x1xi64>, %arg2: tensor<1x1x3x1x4xf32>) -> tensor<24xf32> {
    %expanded = tensor.expand_shape %arg0 [[0], [1], [2, 3]] output_shape [2, 3, 1, 4] : tensor<2x3x4xf32> into tensor<2x3x1x4xf32>
    %5 = tm_tensor.scatter {dimension_map = array<i64: 0>} unique_indices(false) ins(%arg2, %arg1 : tensor<1x1x3x1x4xf32>, tensor<1x1xi64>) outs(%expanded : tensor<2x3x1x4xf32>) {
    ^bb0(%in: f32, %out: f32):
      %6 = arith.addf %out, %in : f32
      tm_tensor.yield %6 : f32
    } -> tensor<2x3x1x4xf32>
    %collapsed = tensor.collapse_shape %5 [[0, 1, 2, 3]] : tensor<2x3x1x4xf32> into tensor<24xf32>
    return %collapsed : tensor<24xf32>
  }
"""


def test_clobbered_args_are_scatter_destinations_through_views():
    """``x.unsqueeze(2).index_put_((i,), v, accumulate=True)``: the scatter
    writes into a view of the argument (it was missed: from the second
    call on the module ran without a copy and added into the input's
    memory, so a later graph that read the input added twice)."""
    assert clobbered_args(SCATTER_INTO_VIEW) == (0,)
    assert clobbered_args(SCATTER_INTO_VIEW.replace("outs(%expanded", "outs(%arg0")) == (0,)


def test_shared_sort_operands():
    assert shared_sort_operands(TWO_SORTS) == "%arg0"
    assert shared_sort_operands(TWO_SORTS.split("%3:2")[0]) is None


IOTA_SHARED = """func.func @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xi64>, tensor<4xi64>) {
    %0 = tensor.empty() : tensor<4xi64>
    %1 = linalg.generic {indexing_maps = [#map], iterator_types = ["parallel"]} outs(%0 : tensor<4xi64>) {
    ^bb0(%out: i64):
      %9 = linalg.index 0 : index
      %10 = arith.index_cast %9 : index to i64
      linalg.yield %10 : i64
    } -> tensor<4xi64>
    %2:2 = tm_tensor.sort dimension(0) outs(%arg0, %1 : tensor<4xf32>, tensor<4xi64>) {
    } -> tensor<4xf32>, tensor<4xi64>
    %3:2 = tm_tensor.sort dimension(0) outs(%arg1, %1 : tensor<4xf32>, tensor<4xi64>) {
    } -> tensor<4xf32>, tensor<4xi64>
    return %2#1, %3#1 : tensor<4xi64>, tensor<4xi64>
}"""


def test_unshare_sort_operands_copies_a_shared_iota():
    assert shared_sort_operands(IOTA_SHARED) == "%1"
    out = unshare_sort_operands(IOTA_SHARED)
    assert shared_sort_operands(out) is None
    assert "%lazy_mlir_unshared0 = linalg.generic" in out
    assert "outs(%arg1, %lazy_mlir_unshared0 : tensor<4xf32>" in out
    assert out.index("%lazy_mlir_unshared0 = ") < out.index("%3:2 = tm_tensor.sort")
    assert out.count("linalg.index 0") == 2
    # an argument sorted in place twice has no op to copy: left to the check
    assert unshare_sort_operands(TWO_SORTS) == TWO_SORTS


def test_unshare_sort_operands_gives_each_of_many_sorts_its_own_iota():
    """A MoE model's routers: 40 sorts of one shape share one iota after CSE
    (qwen4_exp: 42 shared uses; a limit of 32 rounds left the graph to run
    eagerly every step)."""
    head = IOTA_SHARED.split("    %2:2")[0]
    sorts = "".join(f"    %s{i}:2 = tm_tensor.sort dimension(0) outs(%v{i}, %1 : tensor<4xf32>, "
                    "tensor<4xi64>) {\n    } -> tensor<4xf32>, tensor<4xi64>\n" for i in range(40))
    reads = ", ".join(f"%s{i}#1" for i in range(40))
    text = head + sorts + f"    return {reads} : tensor<4xi64>\n}}"
    assert shared_sort_operands(text) == "%1"
    out = unshare_sort_operands(text)
    assert shared_sort_operands(out) is None
    assert out.count("linalg.index 0") == 40


def test_an_index_operand_no_sorted_result_is_read_from_is_harmless_shared():
    """Sorts of unique keys read only the sorted keys: their index operand,
    one iota shared after CSE, may be sorted in place by each."""
    unread = IOTA_SHARED.replace("return %2#1, %3#1 : tensor<4xi64>, tensor<4xi64>",
                                 "return %2#0, %3#0 : tensor<4xf32>, tensor<4xf32>")
    assert shared_sort_operands(unread) is None
    one_read = IOTA_SHARED.replace("return %2#1, %3#1", "return %2#0, %3#1")
    assert shared_sort_operands(one_read) == "%1"
    iota_read = unread.replace("return %2#0,", "return %1, %2#0,")
    assert shared_sort_operands(iota_read) == "%1"


SCATTER_INTO_COPY = """
  func.func @main(%arg0: tensor<3x3xf32>, %arg1: tensor<2x1xi64>, %arg2: tensor<2x1x3xf32>) -> (tensor<3x3xf32>, tensor<3x3xf32>) {
    %11 = linalg.copy {cast = #linalg.type_fn<cast_signed>} ins(%arg0 : tensor<3x3xf32>) outs(%10 : tensor<3x3xf32>) -> tensor<3x3xf32>
    %12 = tm_tensor.scatter {dimension_map = array<i64: 0>} unique_indices(false) ins(%arg2, %arg1 : tensor<2x1x3xf32>, tensor<2x1xi64>) outs(%11 : tensor<3x3xf32>) {
    } -> tensor<3x3xf32>
    return %12, %4 : tensor<3x3xf32>, tensor<3x3xf32>
  }
"""

STREAM_MAIN = """
  util.func public @main(%arg0: !hal.buffer_view, %arg1: !hal.buffer_view) -> (!hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view) attributes {iree.abi.stub} {
    %0 = stream.tensor.import on(#hal.device.affinity<@__device_0>) %arg0 : !hal.buffer_view -> tensor<3x3xf32> in !stream.resource<external>{%c36}
    %5 = stream.timepoint.await %4 => %0 : !stream.resource<external>{%c36}
    %6 = stream.tensor.export on(#hal.device.affinity<@__device_0>) %5 : tensor<3x3xf32> in !stream.resource<external>{%c36} -> !hal.buffer_view
    %7 = stream.tensor.export on(#hal.device.affinity<@__device_0>) %0 : tensor<9xf32> in !stream.resource<external>{%c36} -> !hal.buffer_view
    util.return %6, %arg0, %7, %arg1 : !hal.buffer_view, !hal.buffer_view, !hal.buffer_view, !hal.buffer_view
  }
"""


def test_writes_into_args_sees_through_copies_and_views():
    """A scatter into a copy of an argument (scatter_destinations' copy,
    which IREE may elide) writes into the argument; an insert into a view
    of one too; a scatter into a fresh tensor writes into none."""
    assert writes_into_args(SCATTER_INTO_COPY) == (0,)
    assert writes_into_args(INSERT_AND_RETURN_VIEW) == (0,)
    assert writes_into_args(SCATTER_INTO_COPY.replace("ins(%arg0 :", "ins(%9 :")) == ()
    barrier = SCATTER_INTO_COPY.replace("outs(%11 :", "outs(%b :").replace(
        "    %12 =", '    %b = "iree_tensor_ext.compute_barrier.start"(%11) : '
        "(tensor<3x3xf32>) -> tensor<3x3xf32>\n    %12 =")
    assert writes_into_args(barrier) == (0,)
    own = SCATTER_INTO_COPY.replace(  # (copy_before's copy: a generic IREE cannot erase)
        "linalg.copy {cast = #linalg.type_fn<cast_signed>} ins(%arg0 : tensor<3x3xf32>) outs(%10 : "
        "tensor<3x3xf32>) -> tensor<3x3xf32>",
        'linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]} '
        "ins(%arg0 : tensor<3x3xf32>) outs(%10 : tensor<3x3xf32>) attrs =  {lazy_mlir.own_copy} {")
    assert own != SCATTER_INTO_COPY and writes_into_args(own) == (0,)


def test_folded_into_written_reads_the_stream_phase():
    """The argument returned itself, and an export of its import (a
    reshape), are in its buffer; the written result and an argument not
    written are not counted."""
    assert folded_into_written(STREAM_MAIN, (0,)) == (1, 2)
    assert folded_into_written(STREAM_MAIN, (1,)) == (3,)
    assert folded_into_written(STREAM_MAIN, ()) == ()


def test_barrier_results():
    text = barrier_results(SCATTER_INTO_COPY, (1,))
    assert ('%lazy_mlir_kept1 = "util.optimization_barrier"(%4) : (tensor<3x3xf32>) -> '
            "tensor<3x3xf32>") in text
    assert "return %12, %lazy_mlir_kept1 : tensor<3x3xf32>, tensor<3x3xf32>" in text
