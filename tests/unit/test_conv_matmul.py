"""The conv_matmul fx pass: convolutions and their gradients as im2col + mm,
checked against aten's own convolution on real tensors (no compiler)."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.passes import conv_matmul as cm
from lazy_mlir.config import ConfigError, PipelineConfig

aten = torch.ops.aten

# (N, C, H, W, O, K, stride, padding, dilation)
CASES = [
    (4, 8, 10, 9, 8, 3, 1, 0, 1),
    (2, 8, 11, 12, 8, 3, 2, 1, 1),
    (2, 8, 12, 12, 8, 3, 1, 2, 2),
    (1, 3, 28, 28, 6, 5, 1, 2, 1),
    (3, 64, 8, 8, 64, 1, 1, 0, 1),
    (2, 8, 13, 11, 8, 3, 2, 1, 2),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "N{}C{}H{}W{}O{}K{}s{}p{}d{}".format(*c))
def test_forward_and_backward_match_aten(case):
    n, c, h, w, o, k, s, p, d = case
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(o, c, k, k, generator=g, dtype=torch.float64)
    bias = torch.randn(o, generator=g, dtype=torch.float64)
    conv = ([s, s], [p, p], [d, d], False, [0, 0], 1)
    expected = aten.convolution(x, weight, bias, *conv)
    out = cm.convolution(x, weight, bias, *conv)
    assert out.is_contiguous()
    torch.testing.assert_close(out, expected)
    dy = torch.randn(expected.shape, generator=g, dtype=torch.float64)
    mask = [True, True, True]
    want = aten.convolution_backward(dy, x, weight, [o], *conv, mask)
    for direct in (False, True):  # strided input gradients: torch-mlir's / a direct conv
        got = cm.convolution_backward(dy, x, weight, [o], *conv, mask, direct=direct)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)


def test_one_element_lists_are_repeated():
    # conv2d(padding='valid') records padding [0]; ATen repeats it over both dims
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 4, 7, 6, generator=g, dtype=torch.float64)
    w = torch.randn(3, 4, 2, 3, generator=g, dtype=torch.float64)
    conv = ([2], [0], [1], False, [0], 1)
    torch.testing.assert_close(cm.convolution(x, w, None, *conv),
                               aten.convolution(x, w, None, *conv))
    dy = torch.randn(aten.convolution(x, w, None, *conv).shape, generator=g, dtype=torch.float64)
    for a, b in zip(cm.convolution_backward(dy, x, w, [3], *conv, [False, True, True]),
                    aten.convolution_backward(dy, x, w, [3], *conv, [False, True, True])):
        if b is not None:
            torch.testing.assert_close(a, b)


def test_small_convolutions_are_rewritten_too():
    # torch-mlir's own lowering is the slow one at every size (the module's docstring)
    plain = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    x, w = torch.randn(1, 8, 4, 4), torch.randn(8, 8, 3, 3)               # 4 output positions
    assert cm.convolution(x, w, None, *plain) is not NotImplemented
    dy = torch.randn(1, 8, 2, 2)
    assert cm.convolution_backward(dy, x, w, [8], *plain,
                                   [True, True, True]) is not NotImplemented


def test_left_alone_when_not_covered():
    x, w = torch.randn(2, 4, 8, 8), torch.randn(4, 2, 3, 3)
    conv = ([1, 1], [0, 0], [1, 1], False, [0, 0], 2)
    assert cm.convolution(x, w, None, *conv) is NotImplemented            # groups
    x1, w1 = torch.randn(2, 1, 8, 8), torch.randn(8, 1, 2, 2)
    plain = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert cm.convolution(x1, w1, None, *plain) is NotImplemented         # depth 4 < 9
    x2, w2 = torch.randn(2, 8, 9, 9), torch.randn(8, 8, 3, 3)
    strided = ([2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    dy = torch.randn(2, 8, 4, 4)
    assert cm.convolution_backward(dy, x2, w2, [8], *strided,
                                   [True, False, False]) is NotImplemented  # input grad, stride 2
    xi = torch.ones(2, 8, 9, 9, dtype=torch.int64)
    assert cm.convolution(xi, w2.long(), None, *plain) is NotImplemented


@pytest.mark.parametrize("stride,padding", [(1, 0), (2, 1)])
def test_a_large_weight_gradient_is_summed_over_batch_slices(stride, padding, monkeypatch):
    """Past ``WGRAD_CHUNK_BYTES`` of im2col the weight gradient is a sum of
    mms over slices of the batch (7 images in slices of 3: 3, 3, 1)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 4, 9, 9, generator=g, dtype=torch.float64)
    weight = torch.randn(5, 4, 3, 3, generator=g, dtype=torch.float64)
    conv = ([stride] * 2, [padding] * 2, [1, 1], False, [0, 0], 1)
    dy = torch.randn(aten.convolution(x, weight, None, *conv).shape, generator=g,
                     dtype=torch.float64)
    l = dy.shape[2] * dy.shape[3]
    monkeypatch.setattr(cm, "WGRAD_CHUNK_BYTES", 3 * l * 9 * 4 * 8)  # 3 images of im2col
    monkeypatch.setattr(cm, "MIN_WGRAD_CHUNK_ROWS", 1)
    gm = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, [5], *conv,
                                                          [False, True, False]))(dy, x, weight)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.mm.default) == 3 and targets.count(aten.add.Tensor) == 2
    want = aten.convolution_backward(dy, x, weight, [5], *conv, [False, True, False])[1]
    torch.testing.assert_close(gm(dy, x, weight)[1], want)
    monkeypatch.setattr(cm, "WGRAD_CHUNK_BYTES", 1)  # one image a slice, at most 16 slices
    assert cm.convolution_backward(dy, x, weight, [5], *conv, [False, True, False])[1] \
        .sub(want).abs().max() < 1e-12


@pytest.mark.parametrize("n,o,slices", [(64, 6, 32), (7, 16, 7), (12, 4, 12), (8, 17, 1),
                                         (8, 16, 8)])
def test_a_small_weight_gradient_is_split_along_the_batch(n, o, slices):
    """With ``split_k`` a weight gradient of at most ``SPLIT_K_MAX_CHANNELS``
    output channels and ``SPLIT_K_MAX_OUTPUTS`` elements is one batch matmul
    over slices of the batch (the largest divisor of N up to 32), summed;
    17 channels stay one matmul. Either way it is aten's gradient."""
    c = 3 if o < 16 else 2  # at most 16 x 2*3*3 = 288 gradient elements
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, c, 6, 6, generator=g, dtype=torch.float64)
    weight = torch.randn(o, c, 3, 3, generator=g, dtype=torch.float64)
    conv = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    dy = torch.randn(n, o, 6, 6, generator=g, dtype=torch.float64)
    mask = [False, True, False]
    gm = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, None, *conv, mask,
                                                          split_k=True))(dy, x, weight)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    bmm = [n for n in gm.graph.nodes if n.target == aten.bmm.default]
    if slices > 1:
        assert len(bmm) == 1 and aten.mm.default not in targets
        assert tuple(bmm[0].meta["val"].shape) == (slices, o, c * 9)
    else:
        assert not bmm and targets.count(aten.mm.default) == 1
    want = aten.convolution_backward(dy, x, weight, None, *conv, mask)[1]
    torch.testing.assert_close(gm(dy, x, weight)[1], want)
    plain = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, None, *conv, mask))(
        dy, x, weight)  # without split_k (gpu targets): one matmul
    assert aten.bmm.default not in [n.target for n in plain.graph.nodes]


def test_a_weight_gradient_in_chunks_is_not_split_again(monkeypatch):
    """Past ``WGRAD_CHUNK_BYTES`` the chunked matmuls stay: splitting is for a
    gradient that fits one block."""
    monkeypatch.setattr(cm, "WGRAD_CHUNK_BYTES", 1)
    monkeypatch.setattr(cm, "MIN_WGRAD_CHUNK_ROWS", 1)
    x, weight, dy = torch.randn(4, 2, 6, 6), torch.randn(4, 2, 3, 3), torch.randn(4, 4, 4, 4)
    conv = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    gm = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, None, *conv,
                                                          [False, True, False], split_k=True))(
        dy, x, weight)
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(aten.mm.default) == 4 and aten.bmm.default not in targets


@pytest.mark.parametrize("case", [(2, 4, 9, 10, 5, 3, 2, 1, 1), (2, 4, 12, 11, 5, 3, 2, 0, 1),
                                  (2, 4, 13, 13, 5, 5, 3, 2, 1), (1, 3, 14, 15, 6, 3, 2, 2, 2),
                                  (2, 4, 9, 9, 5, 1, 2, 0, 1)],
                         ids=lambda c: "N{}C{}H{}W{}O{}K{}s{}p{}d{}".format(*c))
def test_a_strided_input_gradient_is_a_stride_1_convolution_of_the_spread_gradient(case):
    """dY with zeros between its rows and columns, padded, convolved with the
    flipped weight: what aten computes, for strides 2 and 3, dilation 2, a
    1x1 kernel and sizes the stride does not divide."""
    n, c, h, w, o, k, s, p, d = case
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(o, c, k, k, generator=g, dtype=torch.float64)
    conv = ([s, s], [p, p], [d, d], False, [0, 0], 1)
    dy = torch.randn(aten.convolution(x, weight, None, *conv).shape, generator=g,
                     dtype=torch.float64)
    want = aten.convolution_backward(dy, x, weight, None, *conv, [True, False, False])[0]
    torch.testing.assert_close(cm._input_grad_direct(dy, weight, h, w, *conv[:3]), want)


# (N, C, H, W, O, KH, KW, stride, padding, dilation): strides 1-4 (4: above
# the window, so some residue classes get no tap), padding beyond the window,
# a 1x1 kernel, 2x2 maps, unequal strides, paddings and dilations per axis
COL2IM_CASES = [
    (2, 3, 5, 7, 4, 3, 3, (2, 2), (1, 1), (1, 1)),
    (2, 3, 6, 6, 4, 1, 1, (2, 2), (0, 0), (1, 1)),
    (1, 2, 9, 8, 3, 3, 2, (3, 3), (2, 2), (1, 1)),
    (2, 2, 7, 7, 3, 3, 3, (2, 2), (1, 1), (2, 2)),
    (1, 2, 2, 2, 3, 3, 3, (1, 1), (1, 1), (1, 1)),
    (2, 4, 8, 8, 5, 7, 7, (2, 2), (3, 3), (1, 1)),
    (1, 2, 5, 5, 2, 2, 2, (4, 4), (0, 0), (1, 1)),
    (1, 3, 10, 9, 2, 3, 3, (2, 3), (1, 0), (1, 2)),
]


@pytest.mark.parametrize("case", COL2IM_CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_col2im_input_gradient_matches_aten(case):
    n, c, h, w, o, kh, kw, s, p, d = case
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(o, c, kh, kw, generator=g, dtype=torch.float64)
    conv = (list(s), list(p), list(d), False, [0, 0], 1)
    dy = torch.randn(aten.convolution(x, weight, None, *conv).shape, generator=g,
                     dtype=torch.float64)
    want = aten.convolution_backward(dy, x, weight, None, *conv, [True, False, False])[0]
    got = cm._input_grad_col2im(dy, weight, h, w, *conv[:3])
    assert got.is_contiguous()
    torch.testing.assert_close(got, want)


def test_direct_takes_strided_and_narrow_input_gradients_as_col2im_matmuls():
    """cpu (``direct``): a strided input gradient, or a stride-1 one narrower
    than DIRECT_MIN_WIDTH, is one matmul with the weight as it lies (no
    convolution, no flipped copy); a wide stride-1 one stays a convolution."""
    table = cm.decompositions(direct=True)
    for size, stride, convs in [(8, 2, 0), (4, 1, 0), (8, 1, 1)]:
        x, w = torch.randn(2, 8, size, size), torch.randn(16, 8, 3, 3)
        conv = ([stride] * 2, [1, 1], [1, 1], False, [0, 0], 1)
        dy = torch.randn(aten.convolution(x, w, None, *conv).shape)
        gm = make_fx(lambda dy, x, w: table[aten.convolution_backward.default](
            dy, x, w, None, *conv, [True, False, False]))(dy, x, w)
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert targets.count(aten.convolution.default) == convs, (size, stride)
        assert aten.flip.default not in targets or convs
        torch.testing.assert_close(gm(dy, x, w)[0], aten.convolution_backward(
            dy, x, w, None, *conv, [True, False, False])[0], rtol=1e-4, atol=1e-4)


def test_traced_conv_step_has_matmuls_instead_of_convolutions():
    def step(x, w):
        out = torch.nn.functional.conv2d(x, w, padding=1)
        return torch.autograd.grad(out.square().sum(), (x, w))

    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    w = torch.randn(16, 8, 3, 3, requires_grad=True)
    gm = make_fx(step, decomposition_table=cm.DECOMPOSITIONS)(x, w)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert aten.mm.default in targets
    assert aten.convolution.default not in targets
    assert aten.convolution_backward.default not in targets
    for a, b in zip(gm(x, w), step(x, w)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_the_bias_gradient_is_summed_per_image_first():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 8, 6, 6, generator=g, dtype=torch.float64)
    w = torch.randn(16, 8, 3, 3, generator=g, dtype=torch.float64)
    conv = ([1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    dy = torch.randn(3, 16, 6, 6, generator=g, dtype=torch.float64)
    mask = [False, False, True]
    gm = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, [16], *conv, mask))(dy, x, w)
    sums = [n.args[1] for n in gm.graph.nodes if n.target == aten.sum.dim_IntList]
    assert sums == [[1], [0]]  # [N, L, O] -> [N, O] -> [O]
    torch.testing.assert_close(gm(dy, x, w)[2], aten.convolution_backward(
        dy, x, w, [16], *conv, mask)[2])


def test_direct_leaves_stride_1_forwards_and_input_grads_to_the_channels_last_pass():
    def step(x, w):
        out = torch.nn.functional.conv2d(x, w, padding=1)
        return torch.autograd.grad(out.square().sum(), (x, w))

    table = cm.decompositions(direct=True)
    # 6 columns: narrower than DIRECT_MIN_WIDTH, matmuls (the end of a ResNet)
    for c, o, size, convs in [(4, 8, 8, 2), (2, 16, 8, 0), (16, 2, 8, 0), (4, 8, 6, 0)]:
        x = torch.randn(2, c, size, size, requires_grad=True)
        w = torch.randn(o, c, 3, 3, requires_grad=True)
        gm = make_fx(step, decomposition_table=table)(x, w)
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        assert targets.count(aten.convolution.default) == convs, (c, o, size)  # fwd, input grad
        assert aten.convolution_backward.default not in targets
        assert aten.mm.default in targets  # the weight gradient
        for a, b in zip(gm(x, w), step(x, w)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    x, w = torch.randn(2, 16, 10, 10), torch.randn(16, 16, 3, 3)
    strided = ([2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    assert table[aten.convolution.default](x, w, None, *strided) is not NotImplemented
    plain = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert table[aten.convolution.default](x, w, None, *plain) is NotImplemented
    assert table[aten.convolution.default](x.double(), w.double(), None,  # float32 only
                                           *plain) is not NotImplemented


def test_config_conv_lowering():
    assert PipelineConfig().conv_lowering == "auto"
    assert PipelineConfig().conv_as_matmul("cpu")
    assert not PipelineConfig().conv_as_matmul("vulkan")
    assert not PipelineConfig().conv_as_matmul(None)
    assert not PipelineConfig(conv_lowering="native").conv_as_matmul("cpu")
    assert PipelineConfig().direct_convs("cpu") and not PipelineConfig().direct_convs("vulkan")
    assert not PipelineConfig(conv_lowering="im2col").direct_convs("cpu")
    assert not PipelineConfig(mixed_precision="bf16").direct_convs("cpu")  # float32 convs only
    assert PipelineConfig(conv_lowering="im2col").conv_as_matmul("vulkan")
    assert PipelineConfig(conv_lowering="im2col").key != PipelineConfig().key
    assert PipelineConfig.from_dict({"conv_lowering": "im2col"}).conv_lowering == "im2col"
    with pytest.raises(ConfigError, match="conv_lowering must be"):
        PipelineConfig(conv_lowering="winograd")


def test_weight_gradient_slices_keep_a_deep_enough_matmul(monkeypatch):
    """Slices of at least ``MIN_WGRAD_CHUNK_ROWS`` output positions, however
    small ``WGRAD_CHUNK_BYTES``: 7 images of 81 positions, 200 a slice at
    least, are 3 slices (3, 3, 1)."""
    monkeypatch.setattr(cm, "WGRAD_CHUNK_BYTES", 1)
    monkeypatch.setattr(cm, "MIN_WGRAD_CHUNK_ROWS", 200)
    x, w = torch.randn(7, 4, 11, 11), torch.randn(5, 4, 3, 3)
    conv = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    dy = torch.randn(7, 5, 9, 9)
    gm = make_fx(lambda dy, x, w: cm.convolution_backward(dy, x, w, None, *conv,
                                                          [False, True, False]))(dy, x, w)
    assert [n.target for n in gm.graph.nodes].count(aten.mm.default) == 3


@pytest.mark.parametrize("case", [(2, 6, 9, 10, 3, 1, 1, 1), (2, 6, 12, 11, 3, 2, 1, 1),
                                  (1, 4, 13, 13, 5, 2, 2, 1), (2, 5, 10, 10, 3, 1, 2, 2)],
                         ids=lambda c: "N{}C{}H{}W{}K{}s{}p{}d{}".format(*c))
def test_depthwise_gradients_match_aten(case):
    """groups = C = O: torch-mlir's own weight gradient does not verify; this
    one is windows times dY, summed."""
    n, c, h, w, k, s, p, d = case
    g = torch.Generator().manual_seed(2)
    x = torch.randn(n, c, h, w, generator=g, dtype=torch.float64)
    weight = torch.randn(c, 1, k, k, generator=g, dtype=torch.float64)
    conv = ([s, s], [p, p], [d, d], False, [0, 0], c)
    dy = torch.randn(aten.convolution(x, weight, None, *conv).shape, generator=g,
                     dtype=torch.float64)
    want = aten.convolution_backward(dy, x, weight, [c], *conv, [True, True, True])
    for a, b in zip(cm.convolution_backward(dy, x, weight, [c], *conv, [True, True, True]), want):
        torch.testing.assert_close(a, b)
    grouped = ([1, 1], [1, 1], [1, 1], False, [0, 0], 2)  # 2 groups of 3: not depthwise
    x6, w6 = torch.randn(2, 6, 8, 8), torch.randn(6, 3, 3, 3)
    assert cm.convolution_backward(torch.randn(2, 6, 8, 8), x6, w6, None, *grouped,
                                   [True, True, False]) is NotImplemented


# (C, O, K, stride, padding, dilation, groups)
ONE_D = [(64, 128, 3, 2, 0, 1, 1), (16, 16, 1, 1, 0, 1, 1), (8, 12, 5, 1, 2, 2, 1),
         (1, 8, 10, 5, 0, 1, 1), (8, 8, 3, 1, 1, 1, 8)]


@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("case", ONE_D, ids=lambda c: "C{}O{}K{}s{}p{}d{}g{}".format(*c))
def test_a_1d_convolution_is_rewritten_as_a_2d_one(case, direct):
    """torch-mlir's 1-d convolution ran as IREE's generic loops (a wav2vec2
    encoder layer 8 ms against eager's 0.2): it is now the 2-d one of
    height 1, rewritten in turn (im2col matmuls; a depthwise one by its own
    gradients), with ATen's values."""
    c, o, k, s, p, d, groups = case

    def step(x, w, b):
        out = torch.nn.functional.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=groups)
        return (out, *torch.autograd.grad(out.square().sum(), (x, w, b)))

    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, c, 40, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(o, c // groups, k, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(o, generator=g, dtype=torch.float64, requires_grad=True)
    gm = make_fx(step, decomposition_table=cm.decompositions(direct=direct))(x, w, b)
    for n in gm.graph.nodes:
        if n.target in (aten.convolution.default, aten.convolution_backward.default):
            assert n.args[0].meta["val"].dim() == 4, n.format_node()  # (no 1-d one left)
    for got, want in zip(gm(x, w, b), step(x, w, b)):
        torch.testing.assert_close(got, want)


def test_a_grouped_or_transposed_1d_convolution_is_left_as_it_is():
    x, w = torch.randn(2, 8, 20), torch.randn(8, 4, 3)
    assert not cm._one_d(x, w, False, 2)  # (grouped: torch-mlir's lowering verifies)
    assert not cm._one_d(x, torch.randn(8, 8, 3), True, 1)
    assert cm._one_d(x, torch.randn(8, 1, 3), False, 8) and cm._one_d(x, torch.randn(4, 8, 3), False, 1)
