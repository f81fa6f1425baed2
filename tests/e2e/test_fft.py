"""torch.fft compiles (``passes/dft.py``: the three FFT primitives as DFT
matrix products in real arithmetic): FNet's token mixing
(``fftn(x, dim=(1, 2)).real``) and one-sided spectral filters train like
eager with no op run eagerly. Before, ``_fft_c2c`` ran eagerly and cut each
graph (sweep hf/masked-lm/fnet: 20 fallback ops in 5 steps)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from e2e_helpers import Counters, same_as_eager, train_steps


class SpectralMixer(torch.nn.Module):
    """FNet's mixing, then a low-pass filter along the sequence (rfft,
    a scale, irfft of the signal's length)."""

    def __init__(self, width: int = 16):
        super().__init__()
        self.inp, self.out = torch.nn.Linear(width, width), torch.nn.Linear(width, 4)

    def forward(self, x):
        h = torch.fft.fftn(self.inp(x), dim=(1, 2)).real
        low = torch.fft.irfft(torch.fft.rfft(h, dim=1, norm="ortho") * 0.5, n=h.shape[1],
                              dim=1, norm="ortho")
        return self.out(F.gelu(h + low)).mean(1)


def _train(device: str, x, y, steps: int = 3):
    torch.manual_seed(0)
    model = SpectralMixer().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = train_steps(model, opt, [(x, y)] * steps, device, F.mse_loss)
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_spectral_mixing_trains_like_eager_without_falling_back():
    x, y = torch.randn(3, 8, 16), torch.randn(3, 4)
    want_losses, want_params = _train("cpu", x, y)
    c = Counters()
    losses, params = _train("lazy", x, y)
    assert c.fell_back() == [] and c.delta("EagerGraph") == 0
    torch.testing.assert_close(losses, want_losses, rtol=1e-5, atol=1e-5)
    for got, want in zip(params, want_params):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_complex_spectra_and_magnitudes_compile():
    """A complex result read back (``fft2``), odd lengths, ``ifft`` and
    magnitudes of a one-sided spectrum (an STFT-like feature)."""
    c = Counters()
    same_as_eager(lambda x: (torch.fft.fft2(x), torch.fft.rfft(x, dim=1).abs(),
                             torch.fft.ifft(torch.fft.fft(x, norm="forward"), norm="forward").real),
                  torch.randn(2, 7, 5), no_fallback=True)
    assert c.delta("EagerGraph") == 0
