"""1-d convolutions train compiled with eager's values: each is the 2-d
convolution of height 1 (``passes/conv_matmul._one_d``), so im2col matmuls
instead of IREE's generic loops over ``linalg.conv_1d_ncw_fcw`` (a wav2vec2
feature encoder trained at 3.8x eager's step; its 64 -> 128, kernel 3,
stride 2 layer's forward took 8 ms against 0.2)."""
from __future__ import annotations

import copy

import torch
from torch import nn

from e2e_helpers import Counters, train_classifier


class AudioEncoder(nn.Module):
    """A speech model's front: strided, pointwise, padded and dilated,
    depthwise and grouped 1-d convolutions, then a classifier."""

    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv1d(1, 16, 10, stride=5, bias=False), nn.GroupNorm(16, 16), nn.GELU(),
            nn.Conv1d(16, 32, 3, stride=2), nn.GELU(),
            nn.Conv1d(32, 32, 1), nn.GELU(),
            nn.Conv1d(32, 32, 5, padding=4, dilation=2), nn.GELU(),
            nn.Conv1d(32, 32, 3, padding=1, groups=32), nn.GELU(),   # depthwise
            nn.Conv1d(32, 32, 4, padding=2, groups=4), nn.GELU())    # grouped: left as it is
        self.head = nn.Linear(32, 5)

    def forward(self, x):
        return self.head(self.convs(x).mean(-1))


def test_1d_convolutions_train_compiled_with_eagers_losses():
    torch.manual_seed(0)
    model = AudioEncoder()
    batches = [(torch.randn(2, 1, 400), torch.randint(0, 5, (2,))) for _ in range(3)]
    eager_model = copy.deepcopy(model)
    want = train_classifier(eager_model, torch.optim.SGD(eager_model.parameters(), lr=0.1),
                            batches, "cpu")
    c = Counters()
    lazy_model = copy.deepcopy(model).to("lazy")
    got = train_classifier(lazy_model, torch.optim.SGD(lazy_model.parameters(), lr=0.1),
                           batches, "lazy")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(lazy_model.parameters(), eager_model.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5)
    assert not c.fell_back() and c.delta("EagerGraph") == 0
