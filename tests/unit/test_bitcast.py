"""view(dtype) as a bitcast for IREE's torch input (``dialects/bitcast.py``)."""


def test_view_dtype_rewritten_as_bitcast():
    from lazy_mlir.passes.bitcast import view_dtype_as_bitcast
    text = ("  %1 = torch.aten.view.dtype %arg0, %int3 : !torch.vtensor<[4,2],f32>, !torch.int"
            " -> !torch.vtensor<[4,2],si32>\n")
    out = view_dtype_as_bitcast(text)
    assert "arith.bitcast %lazy_mlir_bits1_in : tensor<4x2xf32> to tensor<4x2xi32>" in out
    assert "%1 = torch_c.from_builtin_tensor" in out and "view.dtype" not in out
    width = view_dtype_as_bitcast(text.replace("[4,2],si32", "[4,8],ui8"))
    # another element width: IREE's flow.tensor.bitcast (arith.bitcast keeps the shape)
    assert "flow.tensor.bitcast %lazy_mlir_bits1_in : tensor<4x2xf32> -> tensor<4x8xi8>" in width
    assert "view.dtype" not in width
