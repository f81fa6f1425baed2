"""view(dtype) as a call through torch-mlir's linalg pipeline, then a
bitcast in the linalg text (``passes/bitcast.py``)."""
from lazy_mlir.passes.bitcast import calls_as_bitcasts, view_dtype_as_calls

VIEW = ("module {\n  func.func @main(%arg0: !torch.vtensor<[4,2],f32>) -> "
        "!torch.vtensor<[4,2],si32> {\n"
        "    %1 = torch.aten.view.dtype %arg0, %int3 : !torch.vtensor<[4,2],f32>, !torch.int"
        " -> !torch.vtensor<[4,2],si32>\n    return %1 : !torch.vtensor<[4,2],si32>\n  }\n}\n")


def test_view_dtype_written_as_a_declared_call():
    out = view_dtype_as_calls(VIEW)
    assert "view.dtype" not in out
    assert ("%1 = func.call @lazy_mlir_bitcast1(%arg0) : (!torch.vtensor<[4,2],f32>) -> "
            "!torch.vtensor<[4,2],si32>") in out
    assert out.startswith("module {\n  func.func private @lazy_mlir_bitcast1(")
    assert view_dtype_as_calls(VIEW.replace("],si32>", "],i1>")) is None  # bool: no bitcast


def test_calls_written_as_bitcasts():
    linalg = ("module {\n  func.func private @lazy_mlir_bitcast1(tensor<4x2xf32>) -> "
              "tensor<4x2xi32>\n  func.func @main(%arg0: tensor<4x2xf32>) -> tensor<4x2xi32> {\n"
              "    %0 = call @lazy_mlir_bitcast1(%arg0) : (tensor<4x2xf32>) -> tensor<4x2xi32>\n")
    out = calls_as_bitcasts(linalg)
    assert "lazy_mlir_bitcast" not in out
    assert "%0 = arith.bitcast %arg0 : tensor<4x2xf32> to tensor<4x2xi32>" in out
    # another element width: IREE's flow.tensor.bitcast (arith.bitcast keeps the shape)
    width = calls_as_bitcasts(linalg.replace("tensor<4x2xi32>", "tensor<4x8xi8>"))
    assert "%0 = flow.tensor.bitcast %arg0 : tensor<4x2xf32> -> tensor<4x8xi8>" in width
