"""complex_as_real: complex values of an fx graph held as real pairs (a
trailing dimension of 2), complex only at the module's boundary, with the
values eager computes (no compiler: the rewritten graph runs in PyTorch)."""
from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.dialects.runner import PipelineError
from lazy_mlir.passes.complex_as_real import complex_as_real

aten = torch.ops.aten
_BOUNDARY = {aten.view_as_real.default, aten.view_as_complex.default}


def _pairs(t):
    return torch.view_as_complex(t.reshape(*t.shape[:-1], -1, 2))


def _rotary_with_grad(q, freqs):
    """A complex rotary embedding and its backward (``_conj`` of freqs_cis)."""
    q = q.detach().requires_grad_()
    fc = torch.polar(torch.ones_like(freqs), freqs) * 0.5
    out = torch.view_as_real(_pairs(q) * fc[:, None, :]).flatten(2)
    (grad,) = torch.autograd.grad((out * out.cos()).sum(), q)
    return out, grad


CASES = {
    "rotary_forward_backward": (_rotary_with_grad, lambda: (torch.randn(4, 2, 8),
                                                            torch.randn(4, 4))),
    "complex_in_and_out": (lambda c, x: (c * _pairs(x), c.conj() + 1.5, c.abs()),
                           lambda: (torch.randn(3, 2, dtype=torch.complex64),
                                    torch.randn(3, 4))),
    "division_and_sums": (lambda x, y: (torch.view_as_real(_pairs(x) / _pairs(y)),
                                        _pairs(x).sum(-1), _pairs(y).sum().real),
                          lambda: (torch.randn(2, 3, 4), torch.randn(2, 3, 4))),
    "shapes": (lambda x: torch.view_as_real(torch.cat(
        [_pairs(x).transpose(0, -1), _pairs(x).permute(-1, 1, 0).flip(-1)], -2)
        .unsqueeze(-1)[..., 1:, :].squeeze(-1)),
        lambda: (torch.randn(2, 3, 6),)),
    "real_operands": (lambda x, r: (_pairs(x) * r - r, 2.0 - _pairs(x), r / _pairs(x),
                                    torch.where(r > 0, _pairs(x), 0.25 * _pairs(x))),
                      lambda: (torch.randn(3, 4, 2), torch.randn(4))),
    "casts_and_parts": (lambda x: (_pairs(x).real * _pairs(x).imag, _pairs(x).angle(),
                                   _pairs(x).exp(), x.to(torch.complex64),
                                   torch.complex(x, -x).to(torch.float32)),
                        lambda: (torch.randn(3, 4),)),
    "factories": (lambda x: (torch.ones_like(_pairs(x)) - _pairs(x),
                             torch.zeros_like(x, dtype=torch.complex64) + _pairs(x).sum(-1, True),
                             torch.zeros_like(_pairs(x), dtype=torch.float32)),
                  lambda: (torch.randn(3, 4),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_rewritten_graph_computes_eagers_values_in_real_arithmetic(name):
    fn, make = CASES[name]
    inputs = make()
    gm = complex_as_real(make_fx(fn, tracing_mode="fake")(*inputs))
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target in _BOUNDARY:
            continue
        for v in (node.meta["val"], *(a.meta["val"] for a in node.all_input_nodes)):
            assert not (isinstance(v, torch.Tensor) and v.is_complex()), node.format_node()
    got, want = gm(*inputs), fn(*inputs)
    for g, w in zip(got if isinstance(got, (tuple, list)) else [got],
                    want if isinstance(want, (tuple, list)) else [want]):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _fft_losses(x, y):
    mixed = torch.fft.fftn(x, dim=(1, 2)).real  # FNet's token mixing
    half = torch.fft.rfft(y, norm="ortho")
    back = torch.fft.irfft(half * 0.5, n=y.shape[-1] + 1)
    both = torch.fft.rfft2(x, norm="forward")
    outs = (mixed, torch.view_as_real(half), back, torch.view_as_real(both))
    loss = (mixed.sin().sum() + torch.view_as_real(half).pow(2).sum() + back.cos().sum()
            + both.abs().sum() + torch.fft.ifft(torch.fft.fft(y, dim=0), dim=0).real.sum())
    return loss, outs


def _fft_with_grads(x, y):
    grads, outs = torch.func.grad(_fft_losses, argnums=(0, 1), has_aux=True)(x, y)
    return (*outs, *grads)


def test_fft_primitives_and_their_backwards_are_dft_products():
    """torch.fft's three primitives (``_fft_r2c``, ``_fft_c2c``, ``_fft_c2r``:
    n-d, one-sided, every normalization) and their backwards (the one-sided
    r2c's pads its gradient with a complex ``new_zeros``; abs's is ``sgn``)
    as real matrix products, with eager's values."""
    x, y = torch.randn(2, 6, 5), torch.randn(3, 8)
    traced = make_fx(torch.func.functionalize(_fft_with_grads), tracing_mode="fake")(x, y)
    gm = complex_as_real(traced)
    assert not any(str(n.target).startswith("aten._fft") for n in gm.graph.nodes)
    for g, w in zip(gm(x, y), _fft_with_grads(x, y)):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_magnitudes_and_quotients_of_large_values_do_not_overflow():
    """|z| and w / z of parts near 1e30 (whose squares overflow float32) are
    eager's: the larger part is factored out first."""
    def fn(x, y):
        return _pairs(x).abs(), torch.view_as_real(_pairs(y) / _pairs(x))
    x = torch.tensor([[3e30, 4e30], [0.0, 0.0], [float("inf"), 1.0], [1e-30, -2e-30]])
    y = torch.tensor([[1e30, -1e30], [1.0, 0.0], [1.0, 1.0], [1e-30, 1e-30]])
    gm = complex_as_real(make_fx(fn, tracing_mode="fake")(x, y))
    for got, want in zip(gm(x, y), fn(x, y)):
        torch.testing.assert_close(got, want, equal_nan=True)


def test_a_rewrite_that_cannot_apply_is_a_pipeline_error():
    """A dimension of a 0-d complex tensor has no counterpart in its pair:
    the graph runs eagerly (a PipelineError), never a failed step."""
    gm = make_fx(lambda c: c.sum(0), tracing_mode="fake")(torch.tensor(1 + 2j))
    with pytest.raises(PipelineError) as e:
        complex_as_real(gm)
    assert e.value.unlowered == ("sum.dim_IntList",)


def test_a_graph_without_complex_values_is_left_as_it_is():
    gm = make_fx(lambda x: x * 2, tracing_mode="fake")(torch.randn(3))
    assert complex_as_real(gm) is gm


def test_a_complex_op_with_no_rewrite_is_a_pipeline_error_blaming_it():
    gm = make_fx(lambda c: c.cumsum(0), tracing_mode="fake")(
        torch.randn(3, dtype=torch.complex64))
    with pytest.raises(PipelineError) as e:
        complex_as_real(gm)
    assert e.value.unlowered == ("cumsum",)
