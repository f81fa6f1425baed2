"""The conv_channels_last linalg-stage pass: which convolutions it rewrites,
and that IREE computes the same as the channels-first op it replaces."""
import iree.compiler as ic
import iree.runtime as rt
import numpy as np
import pytest
import torch

from lazy_mlir.dialects import linalg_edit as E
from lazy_mlir.dialects.torch_import import parse
from lazy_mlir.passes import conv_channels_last as ccl


def conv(name, x, w, out, stride=1, dilation=1):
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    return (f"  %{name} = linalg.conv_2d_nchw_fchw {{dilations = dense<{dilation}> : "
            f"vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}} ins(%x{name}, %w{name} "
            f": {t(x)}, {t(w)}) outs(%o{name} : {t(out)}) -> {t(out)}\n"), \
        f"%x{name}: {t(x)}, %w{name}: {t(w)}, %o{name}: {t(out)}", t(out)


def run(text: str, args: list) -> np.ndarray:
    """``@main`` of ``text`` compiled by IREE for the host cpu, on ``args``."""
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host"]
    vmfb = ic.compile_str(text, extra_args=flags)
    return np.asarray(rt.load_vm_flatbuffer(vmfb, driver="local-sync").main(*args))


def module(*convs) -> str:
    body = "".join(c[0] for c in convs)
    args = ", ".join(c[1] for c in convs)
    results = ", ".join(c[2] for c in convs)
    names = ", ".join("%" + c[0].split("=")[0].strip()[1:] for c in convs)
    return (f"func.func @main({args}) -> ({results}) {{\n{body}"
            f"  return {names} : {results}\n}}\n")


WIDE = conv("a", (2, 16, 9, 9), (24, 16, 3, 3), (2, 24, 4, 4), stride=2)  # strided, dilated
WIDE = (WIDE[0].replace("dilations = dense<1>", "dilations = dense<[1, 1]>"), *WIDE[1:])
NARROW = conv("b", (2, 2, 8, 8), (16, 2, 5, 5), (2, 16, 4, 4))        # 2 input channels
MAP = conv("c", (16, 32, 12, 12), (64, 32, 10, 10), (16, 64, 3, 3))  # a gradient's "kernel"


def test_convolutions_with_enough_channels_only_are_rewritten():
    m = parse(module(WIDE, NARROW, MAP))
    assert ccl.to_channels_last(m) == 1
    text = str(m)
    assert text.count("linalg.conv_2d_nchw_fchw") == 2  # the narrow one and the big window
    assert text.count("linalg.conv_2d_nhwc_hwcf") == 1
    assert f'"{E.FUSION_BARRIER}"' in text  # the filter transpose stays out of the conv
    assert "call @lazy_mlir_conv_nhwc_2x16x9x9_24x16x3x3_s2x2_d1x1" in text
    m.operation.verify()


def test_the_filter_transpose_is_its_own_dispatch_and_no_host_wait():
    """The barrier keeps the filter's transpose out of the convolution's
    dispatch and is gone from the stream: the program waits once, for its
    results (a ``util.optimization_barrier`` waited mid-run too, and such
    modules leaked on ``local-task``)."""
    m = parse(module(WIDE))
    ccl.to_channels_last(m)
    flags = ["--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
             "--compile-to=stream"]
    stream = ic.compile_str(str(m), extra_args=flags).decode()
    dispatches = [line.split("::@")[1].split()[0] for line in stream.splitlines()
                  if "stream.cmd.dispatch @" in line]
    assert len(dispatches) == 2 and "transpose" in dispatches[0], dispatches
    assert "conv" in dispatches[1] and "transpose" not in dispatches[1], dispatches
    assert stream.count("stream.timepoint.await") == 1
    assert E.FUSION_BARRIER not in stream


def test_a_shape_used_twice_makes_one_function():
    twice = conv("d", (2, 16, 9, 9), (24, 16, 3, 3), (2, 24, 4, 4), stride=2)
    m = parse(module(WIDE, twice))
    assert ccl.to_channels_last(m) == 2
    assert str(m).count("func.func private @lazy_mlir_conv_nhwc_") == 1


@pytest.mark.parametrize("stride,dilation,pad", [(1, 1, 0), (2, 1, 0), (1, 2, 1)])
def test_iree_computes_what_the_channels_first_op_does(stride, dilation, pad):
    h = 10 + 2 * pad
    oh = (h - dilation * 2 - 1) // stride + 1
    c = conv("a", (2, 16, h, h), (32, 16, 3, 3), (2, 32, oh, oh), stride, dilation)
    text = module(c)
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32)
            for s in ((2, 16, h, h), (32, 16, 3, 3), (2, 32, oh, oh))]
    np.testing.assert_allclose(run(str(m), args), run(text, args), rtol=1e-4, atol=1e-4)


def test_a_spatially_transposed_input_still_matches():
    """A transpose of H and W feeding the convolution, next to the pass's own
    transposes (the input IREE 3.13 got wrong for data-tiled convolutions),
    against PyTorch."""
    x, w, o = "tensor<2x16x7x7xf32>", "tensor<16x16x3x3xf32>", "tensor<2x16x5x5xf32>"
    text = f"""func.func @main(%x: {x}, %w: {w}) -> {o} {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : {x}
  %xt = linalg.transpose ins(%x : {x}) outs(%e : {x}) permutation = [0, 1, 3, 2]
  %eo = tensor.empty() : {o}
  %init = linalg.fill ins(%zero : f32) outs(%eo : {o}) -> {o}
  %r = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, strides = dense<1> : vector<2xi64>}} ins(%xt, %w : {x}, {w}) outs(%init : {o}) -> {o}
  return %r : {o}
}}
"""
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((2, 16, 7, 7), (16, 16, 3, 3))]
    want = torch.nn.functional.conv2d(torch.from_numpy(args[0]).transpose(2, 3),
                                      torch.from_numpy(args[1]))
    np.testing.assert_allclose(run(str(m), args), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("avx2,want", [
    (False, [24, 28, 28, 28, 30, 14, 10, 7]),  # column tiles up to 8 (IREE's own)
    (True, [24, 26, 27, 28, 30, 14, 10, 7]),   # up to 6 (AVX2_COLUMN_TILE), widened below 2
])
def test_output_widths_get_a_column_tile_of_four_or_more(monkeypatch, avx2, want):
    monkeypatch.setattr(ccl, "_avx2_host", lambda: avx2)
    assert [ccl._columns(w) for w in (24, 26, 27, 28, 29, 13, 10, 7)] == want
    # 7 and narrower: too few columns to widen


def test_an_avx2_host_gets_its_own_convolution_tile(monkeypatch):
    """On an AVX2 host the channels-last op carries a tile of 6 columns x 16
    channels (IREE's own is 4 x 4), and IREE computes with it what the
    channels-first op does; 6 output channels take all 6 and up to 12
    columns, 12 channels (neither one vector nor a multiple of 8) and an
    AVX-512 host keep IREE's tile."""
    x, w, o = (2, 16, 10, 26), (32, 16, 3, 3), (2, 32, 8, 24)
    text = module(conv("a", x, w, o))
    monkeypatch.setattr(ccl, "_avx2_host", lambda: True)
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    assert ("distribution = [1, 2, 24, 32, 0, 0, 0], vector_common_parallel = "
            "[1, 1, 6, 16, 0, 0, 0], vector_reduction = [0, 0, 0, 0, 1, 1, 8]") in str(m)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x, w, o)]
    np.testing.assert_allclose(run(str(m), args), run(text, args), rtol=1e-4, atol=1e-4)

    x26, o26 = (2, 16, 10, 28), (2, 32, 8, 26)  # 26 columns: tiles of 2, so 32 channels
    m = parse(module(conv("c", x26, w, o26)))
    assert ccl.to_channels_last(m) == 1
    assert "vector_common_parallel = [1, 1, 2, 32, 0, 0, 0]" in str(m)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x26, w, o26)]
    np.testing.assert_allclose(run(str(m), args), run(module(conv("c", x26, w, o26)), args),
                               rtol=1e-4, atol=1e-4)

    # LeNet-5's conv2 input gradient: 16 -> 6 channels, 14 columns
    x6, w6, o6 = (2, 16, 18, 18), (6, 16, 5, 5), (2, 6, 14, 14)
    six = module(conv("d", x6, w6, o6))
    m = parse(six)
    assert ccl.to_channels_last(m) == 1
    assert "vector_common_parallel = [1, 1, 7, 6, 0, 0, 0]" in str(m)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x6, w6, o6)]
    np.testing.assert_allclose(run(str(m), args), run(six, args), rtol=1e-4, atol=1e-4)

    narrow = parse(module(conv("b", x, (12, 16, 3, 3), (2, 12, 8, 24))))
    assert ccl.to_channels_last(narrow) == 1 and "compilation_info" not in str(narrow)
    monkeypatch.setattr(ccl, "_avx2_host", lambda: False)
    m = parse(text)
    assert ccl.to_channels_last(m) == 1 and "compilation_info" not in str(m)


@pytest.mark.parametrize("width,stride,dilation", [(15, 1, 1), (60, 2, 1), (31, 1, 2)])
def test_an_awkward_output_width_is_computed_wider_and_cut(monkeypatch, width, stride, dilation):
    """13, 29 and 27 output columns become 14, 30 and 28 (the input padded
    with zero columns where the wider output reads past it); the bias (a
    random accumulator) and the result match the channels-first op. (An
    AVX-512 host's rule; an AVX2 host keeps 27.)"""
    monkeypatch.setattr(ccl, "_avx2_host", lambda: False)
    ow = (width - dilation * 2 - 1) // stride + 1
    x, w, o = (2, 16, 6, width), (32, 16, 3, 3), (2, 32, (6 - dilation * 2 - 1) // stride + 1, ow)
    text = module(conv("a", x, w, o, stride, dilation))
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    wide = ccl._columns(ow)
    assert wide > ow and f"x{wide}x32xf32>" in str(m) and "tensor.extract_slice" in str(m)
    rng = np.random.default_rng(2)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x, w, o)]
    np.testing.assert_allclose(run(str(m), args), run(text, args), rtol=1e-4, atol=1e-4)


def padded(value: str, stride=1):
    """A convolution of ``x`` zero-padded (or padded with ``value``) by 1, 2
    (top, left) and 1, 0 (bottom, right): torch's padding as torch-mlir
    writes it, a channels-first ``tensor.pad``."""
    x, xp, w = "tensor<2x16x9x10xf32>", "tensor<2x16x11x12xf32>", "tensor<24x16x3x3xf32>"
    o = f"tensor<2x24x{(11 - 3) // stride + 1}x{(12 - 3) // stride + 1}xf32>"
    return f"""func.func @main(%x: {x}, %w: {w}, %o: {o}) -> {o} {{
  %cst = arith.constant {value} : f32
  %p = tensor.pad %x low[0, 0, 1, 2] high[0, 0, 1, 0] {{
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  }} : {x} to {xp}
  %r = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}} ins(%p, %w : {xp}, {w}) outs(%o : {o}) -> {o}
  return %r : {o}
}}
"""


@pytest.mark.parametrize("stride", [1, 2])
def test_a_zero_padded_input_is_padded_after_its_transpose(stride):
    """The function takes the unpadded input and pads it channels last:
    IREE fused the transpose of a channels-first padded input into the
    convolution (a channel-strided read, 4x slower for a whole step)."""
    text = padded("0.000000e+00", stride)
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    out = str(m)
    assert f"call @lazy_mlir_conv_nhwc_2x16x9x10_24x16x3x3_s{stride}x{stride}_d1x1_p1x2x1x0" in out
    assert "low[0, 1, 2, 0] high[0, 1, " in out  # the pad, channels last
    rng = np.random.default_rng(3)
    oh, ow = (11 - 3) // stride + 1, (12 - 3) // stride + 1
    args = [rng.standard_normal(s).astype(np.float32)
            for s in ((2, 16, 9, 10), (24, 16, 3, 3), (2, 24, oh, ow))]
    np.testing.assert_allclose(run(out, args), run(text, args), rtol=1e-4, atol=1e-4)


def test_a_pad_with_another_value_stays_before_the_convolution():
    m = parse(padded("1.000000e+00"))
    assert ccl.to_channels_last(m) == 1
    out = str(m)
    assert "call @lazy_mlir_conv_nhwc_2x16x11x12_24x16x3x3_s1x1_d1x1(" in out
    assert "_p1x2x1x0" not in out and "low[0, 0, 1, 2]" in out


@pytest.mark.parametrize("stride,dilation,pad", [(1, 1, 1), (2, 1, 1), (1, 2, 0)])
def test_a_depthwise_convolution_runs_channels_last(stride, dilation, pad):
    """``linalg.depthwise_conv_2d_nchw_chw`` (16x slower in IREE than the
    channels-last op on a MobileNet-like layer) becomes
    ``depthwise_conv_2d_nhwc_hwc``; with its padding, after the transpose."""
    x, xp, w = (2, 8, 10, 9), (2, 8, 10 + 2 * pad, 9 + 2 * pad), (8, 3, 3)
    o = (2, 8, (xp[2] - 2 * dilation - 1) // stride + 1, (xp[3] - 2 * dilation - 1) // stride + 1)
    t = lambda s: "tensor<" + "x".join(map(str, s)) + "xf32>"  # noqa: E731
    text = f"""func.func @main(%x: {t(x)}, %w: {t(w)}, %o: {t(o)}) -> {t(o)} {{
  %cst = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %x low[0, 0, {pad}, {pad}] high[0, 0, {pad}, {pad}] {{
  ^bb0(%a: index, %b: index, %c: index, %d: index):
    tensor.yield %cst : f32
  }} : {t(x)} to {t(xp)}
  %r = linalg.depthwise_conv_2d_nchw_chw {{dilations = dense<{dilation}> : vector<2xi64>, strides = dense<{stride}> : vector<2xi64>}} ins(%p, %w : {t(xp)}, {t(w)}) outs(%o : {t(o)}) -> {t(o)}
  return %r : {t(o)}
}}
"""
    m = parse(text)
    assert ccl.to_channels_last(m) == 1
    out = str(m)
    assert "linalg.depthwise_conv_2d_nhwc_hwc" in out and "depthwise_conv_2d_nchw_chw" not in out
    assert f"_p{pad}x{pad}x{pad}x{pad}(" in out  # the call takes the unpadded input
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s).astype(np.float32) for s in (x, w, o)]
    np.testing.assert_allclose(run(out, args), run(text, args), rtol=1e-4, atol=1e-4)
