"""``F.linear`` on the lazy device as one recorded node (``lazy/linear.py``,
``ops/linear.py``), against eager PyTorch: outputs and gradients for every
input rank, with and without a bias, both ways of running the backward,
double backward, PyTorch's own path for what is not fused, and the graph
torch-mlir imports (eager's ``addmm``, not our op)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_mlir as lm
from lazy_mlir.config import PipelineConfig
from lazy_mlir.lazy import linear as lazy_linear
from e2e_helpers import Counters

_RECORDED = ("lazy::linear", "linear_unfused::", "lazy::addmm", "lazy::mm", "lazy::t",
             "lazy::view", "lazy::_unsafe_view", "aten::")


def _counters(c: Counters) -> dict:
    names = [n for n in lm.metrics.counter_names() if n.startswith(_RECORDED)]
    return {n: c.delta(n) for n in names if c.delta(n)}


def _case(shape, bias, out=5):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    w = torch.randn(out, shape[-1], generator=g)
    return x, w, (torch.randn(out, generator=g) if bias else None)


def _run(x, w, b, device, create_graph=False):
    """The output and every gradient of a loss that weighs each output."""
    ts = [t.detach().to(device).requires_grad_() for t in (x, w, b) if t is not None]
    out = F.linear(*ts)
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).to(device).cos()
    loss = (out * weights).sum() if not create_graph else (out * out * weights).sum()
    if create_graph:  # a gradient penalty: the input's gradient, differentiated again
        grad, = torch.autograd.grad(loss, ts[0], create_graph=True)
        grad.square().sum().backward()
    else:
        loss.backward()
    return [out, *[t.grad for t in ts]]


def _lazy_as_eager(x, w, b, create_graph=False) -> dict:
    expected = _run(x, w, b, "cpu", create_graph)
    c = Counters()
    actual = _run(x, w, b, "lazy", create_graph)
    lm.mark_step()
    for a, e in zip(actual, expected):  # (float32 rounding at the largest's scale)
        torch.testing.assert_close(a.cpu(), e, rtol=1e-5, atol=1e-5 * max(1.0, e.abs().max().item()))
    return _counters(c)


@pytest.mark.parametrize("backward", ["one", "ops"])
@pytest.mark.parametrize("shape,bias", [((4, 3, 6), True), ((4, 6), True), ((4, 6), False),
                                        ((2, 3, 2, 6), False)])
def test_one_node_forward_and_eagers_gradients(shape, bias, backward, monkeypatch):
    monkeypatch.setenv("LAZY_MLIR_BACKWARD", backward)
    counts = _lazy_as_eager(*_case(shape, bias))
    assert counts.get("lazy::linear") == 1, counts
    assert not [n for n in counts if n.startswith(("linear_unfused", "aten::"))], counts
    if backward == "one":  # the forward recorded alone: no t, view, addmm
        assert not [n for n in counts if n != "lazy::linear"], counts


def test_double_backward_as_eager():
    counts = _lazy_as_eager(*_case((3, 4, 6), True), create_graph=True)
    assert counts.get("lazy::linear") == 1, counts


def test_no_grad_and_empty_inputs():
    x, w, b = _case((2, 3, 6), True)
    c = Counters()
    with torch.no_grad():
        out = F.linear(x.to("lazy"), w.to("lazy"), b.to("lazy"))
    torch.testing.assert_close(out.cpu(), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    assert _counters(c) == {"lazy::linear": 1}
    for shape, width in (((3, 0), 0), ((0, 4), 4)):  # nothing to sum; no rows
        x, w = torch.randn(*shape), torch.randn(5, width)
        torch.testing.assert_close(F.linear(x.to("lazy"), w.to("lazy")).cpu(), F.linear(x, w))


def test_unfused_cases_take_pytorchs_path_and_count_why(monkeypatch):
    x, w, b = _case((4, 3, 6), True)
    reason = lazy_linear.unfused_reason
    xl, wl, bl = (t.to("lazy") for t in (x, w, b))
    assert reason(xl, wl, bl) is None and reason(xl, wl, None) is None
    assert reason(xl[0, 0], wl, bl) == "shapes"  # a vector: PyTorch's matmul
    assert reason(xl, wl, bl.double()) == "dtypes"
    assert reason(xl.int(), wl.int(), None) == "dtypes"
    lm.set_config(PipelineConfig(decompositions=False))
    try:
        assert reason(xl, wl, bl) == "decompositions off"
    finally:
        lm.set_config(None)
    monkeypatch.setenv("LAZY_MLIR_FUSED_LINEAR", "0")
    counts = _lazy_as_eager(x, w, b)
    assert counts.get("linear_unfused::switched off") == 1 and "lazy::linear" not in counts
    assert counts.get("lazy::addmm") == 1, counts  # eager's composite, recorded op by op


def test_imported_as_eagers_matmul():
    """The fx graph torch-mlir imports holds what eager's ``addmm`` becomes
    (an ``mm`` of the input as 2-d, which the host BLAS call and bf16 mixed
    precision match), not ``lazy_mlir.linear``."""
    c = Counters()
    lowered = lm.jit(lambda x, w, b: F.linear(x, w, b).relu()).lower(*_case((4, 3, 6), True))
    assert _counters(c).get("lazy::linear") == 1
    fx_text = lowered.as_text("fx")
    assert "aten.mm.default(view, permute)" in fx_text and "lazy_mlir" not in fx_text, fx_text
    assert "linalg.matmul" in lowered.as_text("linalg")
