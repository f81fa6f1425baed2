"""``torch.nn`` building blocks: a small model per layer family, each trained
on a loss of its output (mean square, or cross-entropy for classifiers)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .entry import Entry, generator, seeded

B = 4


def _mse(model, batch):
    out = model(batch["x"])
    out = out[0] if isinstance(out, tuple) else out
    return (out.float() - 0.5).square().mean()


def _xent(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


def _randn(*shape):
    def batch(step: int) -> dict:
        return {"x": torch.randn(*shape, generator=generator(step))}
    return batch


def _classify(*shape, classes=5):
    def batch(step: int) -> dict:
        g = generator(step)
        return {"x": torch.randn(*shape, generator=g),
                "y": torch.randint(0, classes, (shape[0],), generator=g)}
    return batch


def _tokens(n, vocab=50):
    def batch(step: int) -> dict:
        return {"x": torch.randint(0, vocab, (B, n), generator=generator(step))}
    return batch


class _Recurrent(nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell

    def forward(self, x):
        return self.rnn(x)[0]


class _Bag(nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.bag = nn.EmbeddingBag(50, 16, mode=mode)

    def forward(self, x):
        return self.bag(x)


def _activations() -> nn.Sequential:
    """Every activation between two linears, new modules on each call: built
    once and shared, the entry's eager run trained the very modules its lazy
    run then started from (a mismatch of 0.1 from the first step), and the
    run without dropout fed CPU batches to modules the lazy run had moved."""
    act = [nn.ReLU(), nn.ReLU6(), nn.LeakyReLU(0.1), nn.ELU(), nn.SELU(), nn.CELU(), nn.GELU(),
           nn.GELU("tanh"), nn.SiLU(), nn.Mish(), nn.Hardswish(), nn.Hardsigmoid(),
           nn.Hardtanh(), nn.Softplus(), nn.Softsign(), nn.Tanhshrink(), nn.Tanh(),
           nn.Sigmoid(), nn.LogSigmoid(), nn.PReLU(), nn.RReLU(), nn.Hardshrink(),
           nn.Softshrink(), nn.Threshold(0.1, 0.0), nn.GLU(dim=-1), nn.Softmax(-1),
           nn.LogSoftmax(-1), nn.Softmin(-1)]
    layers = []
    for a in act:  # (GLU halves its input)
        layers += [nn.Linear(16, 32), a, nn.Linear(16 if isinstance(a, nn.GLU) else 32, 16)]
    return nn.Sequential(*layers)


def _blocks() -> dict:
    return {
        "conv1d": (lambda: nn.Sequential(nn.Conv1d(3, 8, 3, padding=1), nn.ReLU(),
                                         nn.Conv1d(8, 4, 3, stride=2)), _randn(B, 3, 16)),
        "conv2d": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                         nn.Conv2d(8, 8, 3, stride=2, groups=8),
                                         nn.Conv2d(8, 4, 1)), _randn(B, 3, 12, 12)),
        "conv3d": (lambda: nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.ReLU(),
                                         nn.Conv3d(4, 2, 2, stride=2)), _randn(B, 2, 6, 6, 6)),
        "conv_transpose1d": (lambda: nn.ConvTranspose1d(3, 4, 3, stride=2), _randn(B, 3, 8)),
        "conv_transpose2d": (lambda: nn.Sequential(nn.ConvTranspose2d(3, 4, 3, stride=2,
                                                                      padding=1, output_padding=1),
                                                   nn.ConvTranspose2d(4, 2, 2, stride=2)),
                             _randn(B, 3, 6, 6)),
        "conv_transpose3d": (lambda: nn.ConvTranspose3d(2, 2, 2, stride=2), _randn(B, 2, 3, 3, 3)),
        "batch_norm": (lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(),
                                             nn.Flatten(), nn.Linear(8 * 36, 16),
                                             nn.BatchNorm1d(16)), _randn(B, 3, 8, 8)),
        "batch_norm3d": (lambda: nn.Sequential(nn.Conv3d(2, 4, 3), nn.BatchNorm3d(4)),
                         _randn(B, 2, 5, 5, 5)),
        "group_instance_norm": (lambda: nn.Sequential(
            nn.Conv2d(3, 8, 3), nn.GroupNorm(2, 8), nn.InstanceNorm2d(8, affine=True),
            nn.LocalResponseNorm(3)), _randn(B, 3, 8, 8)),
        "layer_rms_norm": (lambda: nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32),
                                                 nn.RMSNorm(32), nn.Linear(32, 8)),
                           _randn(B, 7, 16)),
        "rnn": (lambda: _Recurrent(nn.RNN(8, 16, num_layers=2, batch_first=True)),
                _randn(B, 6, 8)),
        "lstm": (lambda: _Recurrent(nn.LSTM(8, 16, num_layers=2, batch_first=True,
                                            dropout=0.1)), _randn(B, 6, 8)),
        "gru": (lambda: _Recurrent(nn.GRU(8, 16, bidirectional=True)), _randn(6, B, 8)),
        "activations": (_activations, _randn(B, 16)),
        "pooling": (lambda: nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.MaxPool2d(2), nn.AvgPool2d(2, ceil_mode=True),
            nn.AdaptiveAvgPool2d(3), nn.LPPool2d(2, 2), nn.AdaptiveMaxPool2d(1)),
            _randn(B, 3, 16, 16)),
        "pooling1d": (lambda: nn.Sequential(nn.Conv1d(3, 4, 3), nn.MaxPool1d(2),
                                               nn.AvgPool1d(2), nn.AdaptiveAvgPool1d(2)),
                         _randn(B, 3, 18)),
        "embedding_bag": (lambda: _Bag("mean"), _tokens(6)),
        "embedding": (lambda: nn.Sequential(nn.Embedding(50, 16, padding_idx=0),
                                            nn.Linear(16, 8)), _tokens(6)),
        "pixel_shuffle": (lambda: nn.Sequential(nn.Conv2d(3, 16, 3, padding=1),
                                                nn.PixelShuffle(2), nn.PixelUnshuffle(2)),
                          _randn(B, 3, 6, 6)),
        "upsample": (lambda: nn.Sequential(nn.Conv2d(3, 4, 1), nn.Upsample(scale_factor=2),
                                           nn.Upsample(scale_factor=1.5, mode="bilinear"),
                                           nn.Conv2d(4, 2, 3)), _randn(B, 3, 5, 5)),
        "transformer_encoder": (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(
            32, 2, 64, batch_first=True), 2), _randn(B, 10, 32)),
        "transformer_decoder": (lambda: _Decoder(), _randn(B, 10, 32)),
        "multihead_attention": (lambda: _Attention(), _randn(B, 10, 32)),
        "dropout_flatten": (lambda: nn.Sequential(nn.Flatten(), nn.Dropout(0.2),
                                                  nn.Linear(48, 5), nn.AlphaDropout(0.1)),
                            _classify(B, 3, 4, 4)),
        "bilinear_cosine": (lambda: _Pairwise(), _randn(B, 12)),
    }


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(32, 2, 64, batch_first=True,
                                                                    norm_first=True), 2)

    def forward(self, x):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        return self.dec(x, x.flip(1), tgt_mask=mask, tgt_is_causal=True)


class _Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True, kdim=16, vdim=16)

    def forward(self, x):
        return self.mha(x, x[..., :16], x[..., 16:], need_weights=True)[0]


class _Pairwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.bilinear = nn.Bilinear(6, 6, 4)
        self.cos = nn.CosineSimilarity()
        self.dist = nn.PairwiseDistance()

    def forward(self, x):
        a, b = x[:, :6], x[:, 6:]
        return self.bilinear(a, b) + (self.cos(a, b) + self.dist(a, b)).unsqueeze(1)


def entries() -> list[Entry]:
    out = []
    for name, (build, batch) in _blocks().items():
        loss = _xent if name == "dropout_flatten" else _mse
        out.append(Entry(f"nn/{name}", "nn", seeded(build), batch, loss))
    return out
