"""LSTM layers as host calls of PyTorch's oneDNN LSTM (host_calls/ops/rnn.py,
host_calls/passes/rnn.py, host_calls/runtime/rnn.py): the decompositions compute eager's
values and gradients, the torch-dialect rewrite leaves calls that lower to
linalg and run through IREE as eager, and only the in-process cpu session
ever turns it on."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from lazy_mlir.config import PipelineConfig
from lazy_mlir.dialects import torch_calls
from lazy_mlir.ops import rnn as rnn_ops
from lazy_mlir.host_calls.ops import rnn as rnn_host
from lazy_mlir.host_calls.passes import rnn as host_rnn
from lazy_mlir.host_calls.runtime import rnn as runtime_rnn
from lazy_mlir.targets import get_target

T, B, I, H = 6, 3, 4, 5


def _params(lstm):
    return [p.detach() for p in lstm._flat_weights]


@pytest.mark.parametrize("layers,bidirectional,bias,batch_first",
                         [(1, False, True, False), (2, True, True, True), (2, False, False, True)])
def test_the_decompositions_compute_eagers_values_and_gradients(layers, bidirectional, bias,
                                                                batch_first):
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, layers, bias=bias, batch_first=batch_first,
                         bidirectional=bidirectional)
    dirs = 1 + bidirectional
    x = torch.randn((B, T, I) if batch_first else (T, B, I), requires_grad=True)
    h0 = torch.randn(layers * dirs, B, H, requires_grad=True)
    c0 = torch.randn(layers * dirs, B, H, requires_grad=True)
    out, (hy, cy) = lstm(x, (h0, c0))
    d_out, d_hy, d_cy = torch.randn_like(out), torch.randn_like(hy), torch.randn_like(cy)
    want = torch.autograd.grad((out * d_out).sum() + (hy * d_hy).sum() + (cy * d_cy).sum(),
                               [x, h0, c0, *lstm._flat_weights])
    width = max(rnn_host.workspace_floats(T, B, w, H) for w in (I, H * dirs))
    config = (bias, layers, bidirectional, batch_first, False, width)
    params = _params(lstm)
    with torch.no_grad():
        got = rnn_ops.host_lstm(x, h0, c0, params, *config)
        assert len(got) == 4 + 2 * layers * dirs
        for g, w in zip(got[:3], (out, hy, cy)):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        assert torch.isnan(got[4]).all()  # the loop backward's packs: NaN, never read here
        saved = [*got[3:], got[1], got[2]]  # (as lazy/rnn.py saves them)
        grads = rnn_ops.host_lstm_backward(d_out, d_hy, d_cy, x, h0, c0, params, saved,
                                            *config)
    for g, w in zip(grads, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def _layer_args():
    return [torch.randn(T, B, I), torch.zeros(B, H), torch.zeros(B, H), torch.randn(4 * H, I),
            torch.randn(4 * H, H), torch.zeros(4 * H), torch.zeros(4 * H)]


def test_a_backward_refuses_a_forward_the_host_did_not_run():
    """The host forward's packs are NaN, the loops' are numbers: a host
    backward reads one element of its direction's pack."""
    width = rnn_host.workspace_floats(T, B, I, H)
    args = _layer_args()
    y, hy, cy, saved = rnn_host.lstm_layer(*args, width, False)
    rest = (torch.ones_like(y), torch.zeros_like(hy), torch.zeros_like(cy), False)
    nan = torch.full((1, 1, 1), float("nan"))
    rnn_host.lstm_layer_backward(*args, y, hy, cy, saved, nan, *rest)  # (accepted)
    with pytest.raises(RuntimeError, match="compiled with different settings"):
        rnn_host.lstm_layer_backward(*args, y, hy, cy, saved, torch.zeros(1, 1, 1), *rest)


def test_the_workspace_is_onednns_own_and_padded_only_when_shorter():
    width = rnn_host.workspace_floats(T, B, I, H)
    saved = rnn_host.lstm_layer(*_layer_args(), width, False)[3]
    assert saved.shape == (width,) and saved.dtype == torch.float32
    assert saved.untyped_storage().nbytes() == 4 * width  # (oneDNN's bytes, no bigger copy)
    # a node's length is the largest of its layers': a smaller layer's is padded (a copy)
    padded = rnn_host.lstm_layer(*_layer_args(), width + 3, False)[3]
    assert padded.shape == (width + 3,) and (padded[width:] == 0).all()


@pytest.mark.parametrize("rnn", ["1", "0"])
def test_the_nodes_cpu_kernels_save_what_the_compiled_graph_does(monkeypatch, rnn):
    """A graph run eagerly while its module compiles: with a workspace and host
    calls on, the node's CPU kernels are the host form (NaN packs, oneDNN's
    workspace), which a compiled host backward accepts; else the loops."""
    monkeypatch.setenv("LAZY_MLIR_RNN", rnn)
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(I, H, 1)
    x, h0, c0 = torch.randn(T, B, I), torch.randn(1, B, H), torch.randn(1, B, H)
    width = rnn_host.workspace_floats(T, B, I, H)
    config = (True, 1, False, False, False, width)
    params = _params(lstm)
    out, hy, cy, layers, pack, saved = torch.ops.lazy_mlir.lstm(x, h0, c0, params, *config)
    torch.testing.assert_close(out, lstm(x, (h0, c0))[0].detach(), rtol=1e-5, atol=1e-6)
    assert torch.isnan(pack).all() == (rnn == "1")
    assert (saved == 0).all() == (rnn == "0")
    grads = torch.ops.lazy_mlir.lstm_backward(torch.ones_like(out), None, None, x, h0, c0,
                                              params, [layers, pack, saved, hy, cy], *config)
    assert not any(torch.isnan(g).any() for g in grads)


def _one_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, dy, width):
    """Forward then backward of one reversed layer, as the lowering writes them."""
    ops = torch.ops.lazy_mlir
    y, hy, cy, saved = ops.host_lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh, width, True)
    nan = torch.full((1, 1, 1), float("nan"))  # (the host forward's pack)
    grads = ops.host_lstm_layer_backward(x, h0, c0, w_ih, w_hh, b_ih, b_hh, y, hy, cy, saved,
                                         nan, dy, torch.zeros_like(hy), torch.zeros_like(cy),
                                         True)
    return (y, hy, cy, *grads)


def test_the_calls_lower_to_linalg_and_run_through_iree_as_eager():
    import iree.compiler as ic
    import iree.runtime as rt

    from lazy_mlir.dialects.runner import run_pipeline
    from lazy_mlir.dialects.torch_import import import_fx
    from lazy_mlir.passes import pipelines

    g = torch.Generator().manual_seed(0)
    args = [torch.randn(T, B, I, generator=g), torch.randn(B, H, generator=g),
            torch.randn(B, H, generator=g), torch.randn(4 * H, I, generator=g),
            torch.randn(4 * H, H, generator=g), torch.randn(4 * H, generator=g),
            torch.randn(4 * H, generator=g), torch.randn(T, B, H, generator=g)]
    width = rnn_host.workspace_floats(T, B, I, H)
    gm = make_fx(lambda *a: _one_layer(*a, width))(*args)
    module = import_fx(gm)
    assert host_rnn.calls_instead(module) == 2
    text = str(module)
    assert "torch.operator" not in text and host_rnn.CALL_MARK + "lstm_layer_reverse(" in text
    config = PipelineConfig()
    backend = run_pipeline(text, pipelines.as_pipeline(pipelines.torch_backend(config)), "b")
    linalg = run_pipeline(backend, torch_calls.without_contract_check(
        pipelines.as_pipeline(pipelines.linalg(config))), "linalg")
    assert torch_calls.contract_violation(linalg) is None
    assert torch_calls.contract_violation(backend) is not None
    cpu = get_target("cpu")
    vmfb = ic.compile_str(linalg, extra_args=[f"--iree-hal-target-backends={cpu.backend}",
                                              *cpu.flags])
    assert runtime_rnn.imports_rnn(vmfb)
    rconfig = rt.Config("local-sync")
    ctx = rt.SystemContext(config=rconfig)
    ctx.add_vm_module(runtime_rnn.create_module(rconfig.device))
    ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance, vmfb))
    outs = ctx.modules.module["main"](*[a.numpy() for a in args])
    want = _one_layer(*args, width)
    assert len(outs) == len(want)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(np.asarray(got.to_host()), w.numpy(), rtol=1e-5, atol=1e-6)
