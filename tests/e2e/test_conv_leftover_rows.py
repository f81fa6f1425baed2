"""A strided convolution whose padded input has a row and column the output
never reads (CvT's strided depthwise key/value projections at 2x2: padded to
4x4, a 3x3 window of stride 2 gives one output)."""
from __future__ import annotations

import pytest
import torch

from e2e_helpers import lazy


@pytest.mark.parametrize("groups", [64, 1])
def test_a_padded_rows_leftover_past_the_last_window_compiles(groups, counters):
    """conv_channels_last padded the channels-last input to torch's padded
    size, one row and column past the last window: for a 1x1 output linalg
    inferred a 4-row window from it ("inferred input/output operand #1 has
    shape's dimension #0 to be 4, but found 3"), the compile failed and the
    whole graph ran eagerly (sweep hf/image-classification/cvt: 5 eager
    graphs in 5 steps). The pass pads only the rows and columns read."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, stride=2, padding=1, groups=groups)
    x = torch.randn(2, 64, 2, 2)
    expected = conv(x)
    actual = conv.to("lazy")(lazy(x)).cpu()
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert counters.delta("EagerGraph") == 0 and counters.fell_back() == []
